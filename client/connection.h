// Connection: the client's end of the unix socket to its node daemon
// (proto/worker.proto): the pool, the Hello handshake, request ids, and a
// reader thread that completes each request's future from its response.
// Thread-safe. Threads: the reader thread (started by Open, joined by the
// destructor) completes futures and runs Then() callbacks.
#ifndef STARLING_CLIENT_CONNECTION_H_
#define STARLING_CLIENT_CONNECTION_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/client.h"
#include "client/future_state.h"
#include "client/shared_pool.h"
#include "proto/worker.pb.h"

namespace starling {
namespace client {

class Connection {
 public:
  static absl::StatusOr<std::unique_ptr<Connection>> Open(
      const ClientOptions& options);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  const proto::HelloReply& hello() const { return hello_; }
  const ClientOptions& options() const { return options_; }
  SharedPool* pool() { return pool_.get(); }
  // "worker 1 of rank 2 (daemon 127.0.0.1:29500)": where, for messages.
  const std::string& where() const { return where_; }

  // Sends `request` (its id is set here); the future completes with the
  // daemon's answer, annotated with `what` and where(). `reply` (may be
  // null) receives the response; it must outlive the future's completion.
  std::shared_ptr<internal::FutureState> Send(proto::WorkerRequest request,
                                              std::string what,
                                              proto::WorkerResponse* reply);

  // Declarations, kept here for AllocateTensor and to check buffer sizes.
  absl::Status Declare(const proto::TensorSpec& spec);
  absl::StatusOr<uint64_t> ElementsOf(absl::string_view tensor) const;
  // Ends the declarations (once, collectively); later calls return the
  // first call's result.
  absl::Status EnsureCommitted();
  int total_workers() const;

 private:
  Connection(ClientOptions options, std::unique_ptr<SharedPool> pool, int fd);
  void ReadLoop();

  const ClientOptions options_;
  std::unique_ptr<SharedPool> pool_;
  const int fd_;
  proto::HelloReply hello_;
  std::string where_;
  std::thread reader_;

  absl::Mutex write_mu_;  // one writer at a time on fd_
  mutable absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  struct Pending {
    std::shared_ptr<internal::FutureState> state;
    std::string what;
    proto::WorkerResponse* reply = nullptr;
  };
  std::map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  // Set when the connection broke; fails later sends.
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> declared_ ABSL_GUARDED_BY(mu_);

  mutable absl::Mutex commit_mu_;  // held across the commit round trip
  bool committed_ ABSL_GUARDED_BY(commit_mu_) = false;
  absl::Status commit_status_ ABSL_GUARDED_BY(commit_mu_);
  int total_workers_ ABSL_GUARDED_BY(commit_mu_) = 0;
};

}  // namespace client
}  // namespace starling

#endif  // STARLING_CLIENT_CONNECTION_H_
