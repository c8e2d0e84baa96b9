// Acceptor: the accepting half of mesh formation (mesh.h). One thread
// accepts every connection to the listening socket and runs each one's
// handshake (Handshaker, accepting side) on a non-blocking socket under
// epoll, all of them concurrently and each against its own deadline
// (handshake_timeout from its accept). So a stray, idle, garbage or forged
// connection delays no one: it fails its own handshake or runs out of time,
// is logged with its source address and closed. Only a peer that completed
// the handshake (with a cluster secret: proved it knows it) claims the slot
// (rank, socket index) its HELLO names; a claim on a slot already held is
// refused, never the holder. At most kMaxPendingHandshakes connections
// handshake at once; beyond that the oldest is dropped for the newcomer.
//
// Thread-safe: Wait() and TakeConnections() from the owner's thread; one
// internal thread, from Start() to the destructor.
#ifndef STARLING_SERVER_TRANSPORT_TCP_ACCEPTOR_H_
#define STARLING_SERVER_TRANSPORT_TCP_ACCEPTOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/transport/handshake.h"
#include "server/transport/tcp/handshaker.h"
#include "server/transport/tcp/socket_util.h"
#include "server/transport/tcp/tcp_options.h"

namespace starling {
namespace transport {
namespace tcp {

class Acceptor {
 public:
  static constexpr size_t kMaxPendingHandshakes = 256;

  // Starts accepting, on `listen_fd` (borrowed: it must outlive the
  // Acceptor; made non-blocking), the connections of ranks options.rank+1 ..
  // size-1, options.sockets_per_peer each. Errors: epoll or eventfd setup.
  static absl::StatusOr<std::unique_ptr<Acceptor>> Start(
      const TcpOptions& options, int listen_fd, const RankNamer& name);

  Acceptor(const Acceptor&) = delete;
  Acceptor& operator=(const Acceptor&) = delete;
  // Stops the thread and closes every connection not taken.
  ~Acceptor();

  // Blocks until every expected connection is in (Ok), `deadline` passes
  // (DeadlineExceeded "rank 0 (...) gave up after 30s waiting for
  // connections from rank 2 (...); last refused: ..."), or accepting failed
  // for good (its error, e.g. ResourceExhausted).
  absl::Status Wait(absl::Time deadline);

  // After Wait() returned Ok: moves the connections into
  // (*mesh)[rank][socket index], which must be sized for them.
  void TakeConnections(std::vector<std::vector<ScopedFd>>* mesh);

 private:
  struct Pending;

  Acceptor(const TcpOptions& options, int listen_fd, const RankNamer& name);
  absl::Status Init();
  void Loop();
  void AcceptAll();
  void Serve(Pending* pending, uint32_t events);
  // Sends what `pending` has queued; false if the connection failed.
  bool Flush(Pending* pending);
  void Finish(Pending* pending);
  void Drop(Pending* pending, const absl::Status& why);
  // The handshake accepted first (earliest deadline) that has not claimed a
  // slot; null if none.
  Pending* OldestUnadmitted();
  void ExpireHandshakes();
  // Logs (bounded) that `what` ("refused", "dropped") happened to the
  // connection from `address`, and keeps `why` for Wait()'s message.
  void NoteRefusal(const std::string& address, const absl::Status& why,
                   const char* what);
  void SetInterest(Pending* pending, bool writable);

  const TcpOptions options_;
  const int listen_fd_;
  const RankNamer name_;
  const int first_rank_;  // the lowest rank that connects to us
  const int expected_;    // connections to accept
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;

  // Loop thread only.
  absl::flat_hash_map<int, std::unique_ptr<Pending>> pending_;
  // Slots claimed by an admitted peer, filled or still being told WELCOME.
  std::vector<std::vector<bool>> claimed_;
  int refusals_logged_ = 0;

  absl::Mutex mu_;
  std::vector<std::vector<ScopedFd>> slots_ ABSL_GUARDED_BY(mu_);
  int filled_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status last_refusal_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);  // accepting failed for good
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tcp
}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_TCP_ACCEPTOR_H_
