// Connection: the client's end of the unix socket to its node daemon
// (proto/worker.proto): the pool, the Hello handshake, request ids, one
// outgoing queue drained by a writer thread, and a reader thread that
// completes each request's future from its response (matched by id).
// No lock is held across a socket write or read, or a callback.
// Thread-safe. Threads: the writer and reader threads (started by Open,
// joined by the destructor); the reader completes futures and runs Then()
// callbacks.
#ifndef STARLING_CLIENT_CONNECTION_H_
#define STARLING_CLIENT_CONNECTION_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/client.h"
#include "client/future_state.h"
#include "client/shared_pool.h"
#include "proto/worker.pb.h"
#include "server/base/scoped_fd.h"
#include "server/base/shared_parameters.h"

namespace starling {
namespace client {

class Connection {
 public:
  // `pool`: an existing pool to hand the daemon (Client::Rejoin: the
  // worker's buffers stay where they are); null makes a new one.
  static absl::StatusOr<std::unique_ptr<Connection>> Open(
      const ClientOptions& options, std::unique_ptr<SharedPool> pool = nullptr);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  const proto::HelloReply& hello() const { return hello_; }
  const ClientOptions& options() const { return options_; }
  SharedPool* pool() { return pool_.get(); }
  // "worker 1 of rank 2 (daemon 127.0.0.1:29500)": where, for messages.
  const std::string& where() const { return where_; }

  // Queues `request` (its id is set here); the future completes with the
  // daemon's answer (kept in the future's state), annotated with `what`
  // and where().
  std::shared_ptr<internal::FutureState> Send(proto::WorkerRequest request,
                                              std::string what);

  // The pool, taken away before this connection is closed (Rejoin); the
  // connection allocates nothing after.
  std::unique_ptr<SharedPool> TakePool() { return std::move(pool_); }
  // The declarations in order, as the worker made them.
  std::vector<proto::TensorSpec> Declarations() const;

  // Declarations, kept here for AllocateTensor and to check buffer sizes.
  absl::Status Declare(const proto::TensorSpec& spec);
  absl::StatusOr<uint64_t> ElementsOf(absl::string_view tensor) const;
  // A declared tensor: where it begins in the flat parameters (declaration
  // order), its size, type, position and (after the commit) bucket.
  struct Declared {
    uint64_t offset = 0;
    uint64_t elements = 0;
    proto::DataType dtype = proto::DATA_TYPE_FLOAT32;
    int index = 0;
    int bucket = 0;
  };
  // InvalidArgument if `tensor` was not declared.
  absl::StatusOr<Declared> FindDeclared(absl::string_view tensor) const;
  // Gradient buckets of the committed declarations (0 before).
  int buckets() const;
  // Tensors in declaration order.
  int declared_count() const;
  // Tensors in each bucket (after the commit).
  std::vector<int> TensorsPerBucket() const;
  // The initial parameters the commit will carry (SetInitialParameters,
  // or OfferInitialParameters with `offered`). FailedPrecondition once the
  // commit was sent.
  absl::Status SetInitialParameters(std::vector<proto::PoolSlice> slices,
                                    bool offered);
  // Set from each pull's reply (-1 before any).
  int64_t last_pulled_version() const {
    return last_pulled_version_.load(std::memory_order_relaxed);
  }
  // Ends the declarations (once per run, collectively): the first caller
  // sends the commit, every caller waits for its answer (bounded by the
  // options' timeout; no lock held while waiting). Later calls return the
  // first call's result.
  absl::Status EnsureCommitted();
  int total_workers() const;
  uint64_t run_id() const;
  int64_t next_step() const;
  // The shard owners keep no step (Client::Rejoin): the worker's own.
  void set_next_step(int64_t step);
  // After Finish(): the next declarations start the next run (unmaps the
  // run's parameters).
  void ResetRun();

  // The run's parameters as the daemon shares them (sync modes), mapped
  // read-only at the commit: FailedPrecondition before the commit, when
  // the daemon passed none (parameter-server mode, an empty model), or
  // DataLoss when the memfd it passed did not match the declarations.
  struct SharedParameters {
    const SharedParametersHeader* header = nullptr;
    const float* parameters = nullptr;
    uint64_t elements = 0;
  };
  absl::StatusOr<SharedParameters> shared_parameters() const;
  // Where tensor `name` begins in the parameters (declaration order).
  absl::StatusOr<uint64_t> OffsetOf(absl::string_view tensor) const;

 private:
  Connection(ClientOptions options, std::unique_ptr<SharedPool> pool,
             ScopedFd fd);
  // Send() with mu_ held (the commit is sent under it, once).
  std::shared_ptr<internal::FutureState> SendLocked(
      proto::WorkerRequest request, const std::string& what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReadLoop();
  void WriteLoop();
  // Fails every pending op and later sends with `why`.
  void Break(const absl::Status& why);
  // Maps params_fd_ (if any) for the committed declarations.
  void MapParametersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnmapParametersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ClientOptions options_;
  std::unique_ptr<SharedPool> pool_;
  const ScopedFd fd_;
  proto::HelloReply hello_;
  std::string where_;
  std::thread reader_;
  // Set when the reader thread ends (the daemon closed, or the connection
  // broke).
  absl::Notification reader_done_;
  static constexpr absl::Duration kCloseWait = absl::Seconds(2);
  std::thread writer_;

  mutable absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  struct Pending {
    std::shared_ptr<internal::FutureState> state;
    std::string what;
  };
  std::map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  // Serialized requests waiting for the writer thread.
  std::deque<std::string> outgoing_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  // Set when the connection broke; fails later sends.
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  // The declared tensors (declared_elements_ is their sum).
  std::map<std::string, Declared, std::less<>> declared_ ABSL_GUARDED_BY(mu_);
  uint64_t declared_elements_ ABSL_GUARDED_BY(mu_) = 0;
  // The declarations in order (buckets set at the commit) and the count
  // of buckets.
  std::vector<proto::TensorSpec> specs_ ABSL_GUARDED_BY(mu_);
  int buckets_ ABSL_GUARDED_BY(mu_) = 0;
  // The commit's initial parameters (SetInitialParameters).
  std::vector<proto::PoolSlice> initial_ ABSL_GUARDED_BY(mu_);
  bool initial_offered_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int64_t> last_pulled_version_{-1};

  // The parameters' memfd from the commit reply (owned), until mapped.
  ScopedFd params_fd_ ABSL_GUARDED_BY(mu_);
  // The read-only mapping of it (header page, then parameters), or null.
  void* params_map_ ABSL_GUARDED_BY(mu_) = nullptr;
  size_t params_map_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Why there is no mapping after the commit (DataLoss), if it failed.
  absl::Status params_error_ ABSL_GUARDED_BY(mu_);

  // The current run's commit: null until the first data op sends it.
  std::shared_ptr<internal::FutureState> commit_ ABSL_GUARDED_BY(mu_);
  int total_workers_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t run_id_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_step_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace client
}  // namespace starling

#endif  // STARLING_CLIENT_CONNECTION_H_
