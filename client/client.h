// Starling's client API: what a worker process links to hand its gradients
// to the node daemon on its machine (DESIGN.md "One synchronous step").
// This is the only header Starling promises to users.
//
//   ClientOptions options;
//   options.socket_path = "/run/starling/node.sock";
//   options.worker_index = 0;                 // 0 .. local workers - 1
//   auto client = Client::Connect(options);   // absl::StatusOr
//   (*client)->DeclareTensor("w", {1024}, DataType::kFloat32);
//   absl::Span<float> w = *(*client)->AllocateTensor("w");  // shared memory
//   absl::Span<float> g = *(*client)->AllocateTensor("w");
//   for (int64_t step = (*client)->first_step(); step < steps; ++step) {
//     (*client)->PullParameters(step, {{"w", w}});    // after `step` updates
//     ... compute g from w ...
//     (*client)->PushGradients(step, {{"w", g}});
//   }
//   (*client)->Finish();                      // the run ends when all did
//
// Data: the worker's tensor buffers live in a shared-memory pool the client
// creates (a memfd) and hands to the daemon at Connect(); Allocate*() carve
// buffers from it. Push and all-reduce read the worker's buffers in place,
// pull writes them in place: zero copies between worker and daemon. Buffers
// outside the pool are refused (InvalidArgument). In sync modes a worker
// may also read the daemon's parameters in place, read-only
// (ParametersView): no copy at all.
//
// Tensors: every worker of the job declares the same tensors (name, shape,
// dtype) in the same order before its first push, pull, all-reduce or
// barrier; the first of those ends the declarations (every worker of the
// job takes part). A different shape or dtype than another worker's fails
// with InvalidArgument naming the tensor, both declarations and both
// workers (rank / local worker). The parameters are the tensors laid out
// one after the other; their elements must add up to the job's parameter
// count. Element types: float32, float16 and bfloat16. The daemons keep
// float32 master parameters, accumulate in float32 and keep the optimizer
// state in float32 whatever the tensors' type; when every tensor is 16-bit
// (one type), the gradients and parameters also cross the network in it
// (half the bytes); pushes and pulls move the declared type.
//
// Steps: PushGradients(step) (or the parts of PushGradientsPartAsync)
// contributes to update `step`: the daemons average all workers'
// gradients, reduce-scatter, apply the optimizer to their shards and
// all-gather. PullParameters(version) waits for `version` updates in the
// synchronous mode ("sync_sgd"), so PullParameters(0) gives the initial
// parameters (SetInitialParameters, or zeros). In "async_sgd" (stale
// synchronous parallel) PullParameters(step) returns the freshest
// parameters the daemon holds once they include the updates of every step
// before step - staleness(): a worker pushes asynchronously and computes
// step t + 1 while step t is reduced, at most staleness() steps ahead of
// the slowest worker. In "parameter_server" mode a push is applied by the
// shard owners at once and a pull reads their current values (`version`
// is ignored).
//
// EASGD modes (Zhang, Choromanska & LeCun 2015; job().elastic_tau, alpha,
// momentum): each worker keeps its own parameters x_i and takes its own
// local steps; the daemons hold the centre variable x~, and a push is an
// elastic difference d = alpha (x_i - x~) that the daemons add to x~ (the
// worker subtracts it from x_i itself). "sync_easgd": every worker pushes
// its d as step k of the synchronous path (summed, added, all-gathered:
// deterministic), PullParameters(k + 1) reads x~ after exchange k.
// "async_easgd", "async_measgd", "hogwild_easgd": pushes and pulls as in
// "parameter_server" (hogwild: unserialised centre updates).
// "round_robin_easgd": PullParameters(v) for v > 0 first waits until the
// shard owners applied v pushes, so that worker g's exchange k, pulling
// v = k * total_workers() + g, comes after every earlier worker's.
//
// Runs: the daemons outlive the workers. A run begins when every worker of
// the job ended its declarations and ends when every worker called
// Finish(); its memory (parameters, optimizer state) is then released and
// the next workers' declarations begin a new run on the same daemons. A
// worker that leaves a running run without Finish() (it crashed, was
// killed, or exited) can be replaced: a new worker with the same index
// that connects within the daemon's grace (starling-node --worker_grace,
// default 60 s) takes its place; first_step() tells it where its
// predecessor stopped, it declares the same tensors, pulls that version
// and goes on; no update is lost or applied twice. Past the grace the run
// fails on every daemon with an error naming the missing worker. A worker
// that connects and leaves before its run began changes nothing.
//
// Errors are absl::Status with what and where: the op, tensor, step, this
// worker, the daemon's rank and address. Unavailable when the daemon went
// away; DeadlineExceeded after ClientOptions::timeout; what the daemons
// report otherwise (a lost peer daemon is named by rank).
//
// Thread-safe: any method may be called from any thread; ops are sent in
// call order. Callbacks given to Future::Then run on the client's reader
// thread (or at once on the caller's, if already done) and must not block.
#ifndef STARLING_CLIENT_CLIENT_H_
#define STARLING_CLIENT_CLIENT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/base/data_type.h"

namespace starling {
namespace proto {
class CollectiveRequest;
}  // namespace proto

namespace client {

// The element types (kFloat32, kFloat64, kFloat16, kBFloat16, kInt32,
// kInt64) and their names ("float32", ...), and the reduction operators,
// defined once for the client and the daemons in server/base/data_type.h.
using ::starling::DataType;
using ::starling::DataTypeName;
// kSum, kMin, kMax, kAverage, kProduct (server/base/data_type.h).
using ::starling::ReduceOp;
using ::starling::ReduceOpName;

struct ClientOptions {
  // The daemon's worker socket (starling-node --worker_socket). Required.
  std::string socket_path;
  // This worker's index among its daemon's workers, 0 .. local workers - 1.
  int worker_index = 0;
  // For messages; default "worker <index>".
  std::string worker_name;
  // Bound on Connect() and on every synchronous op.
  absl::Duration timeout = absl::Seconds(60);
  // Bound on the daemon's answer to this worker's hello (Connect, Rejoin):
  // a process that accepts connections on the socket but does not answer
  // is named within it (DeadlineExceeded), and one that answers in
  // another protocol at once (FailedPrecondition). Zero: `timeout`.
  absl::Duration connect_timeout = absl::ZeroDuration();
  // Size of the shared-memory pool buffers are allocated from.
  size_t pool_bytes = size_t{64} << 20;
  // Gradient buckets (see PushGradientsPartAsync): the declared tensors,
  // last declared first, are grouped into buckets of at most this many
  // bytes (a tensor is never split: a bigger one has a bucket of its own);
  // 0 puts every tensor in one bucket. Part of
  // the run's tensor table: every worker of the job must use the same
  // value (a difference fails the declarations, naming both).
  size_t bucket_bytes = kDefaultBucketBytes;
  static constexpr size_t kDefaultBucketBytes = size_t{256} << 10;
};

// A named buffer of the worker, inside the client's pool: float32 elements
// for a float32 tensor, 16-bit ones (IEEE binary16 or bfloat16 bits, as
// the tensor was declared) for a float16 or bfloat16 tensor.
struct Tensor {
  Tensor(std::string name, absl::Span<float> data)
      : name(std::move(name)),
        bytes(reinterpret_cast<std::byte*>(data.data()),
              data.size() * sizeof(float)),
        element_bytes(sizeof(float)) {}
  Tensor(std::string name, absl::Span<uint16_t> data)
      : name(std::move(name)),
        bytes(reinterpret_cast<std::byte*>(data.data()),
              data.size() * sizeof(uint16_t)),
        element_bytes(sizeof(uint16_t)) {}
  std::string name;
  absl::Span<std::byte> bytes;
  size_t element_bytes;
  size_t elements() const { return bytes.size() / element_bytes; }
};

// float32 <-> the 16-bit types, element by element (round to nearest
// even; NaN stays NaN). `to` must be as long as `from`.
void ToFloat16(absl::Span<const float> from, absl::Span<uint16_t> to);
void ToBFloat16(absl::Span<const float> from, absl::Span<uint16_t> to);
void FromFloat16(absl::Span<const uint16_t> from, absl::Span<float> to);
void FromBFloat16(absl::Span<const uint16_t> from, absl::Span<float> to);

// The data partitions this worker reads in each iteration of a schedule
// (Client::GetSchedule). A partition is one mini-batch: partition p of an
// epoch holds samples [p * B, min((p + 1) * B, samples)) of that epoch's
// order, where B = ceil(samples / partitions_per_epoch).
struct ScheduledIteration {
  int64_t iteration = 0;  // global, from 0
  int64_t epoch = 0;      // iteration / iterations_per_epoch, unless the
                          // group re-formed while the run went on
  int64_t iteration_in_epoch = 0;
  // The epoch's last iteration (an epoch in which the group re-formed has
  // another number of iterations than iterations_per_epoch).
  bool last_in_epoch = false;
  // This worker's partitions in it: one, or none in an epoch's last
  // iteration when the partitions ran out (push zero gradients then).
  std::vector<uint64_t> partitions;
};
struct Schedule {
  std::vector<ScheduledIteration> iterations;  // K, fewer at the end
  bool done = false;                 // nothing follows these iterations
  int64_t iterations_per_epoch = 0;  // of a whole epoch of this group
  int64_t epochs = 0;
  uint64_t partitions_per_epoch = 0;
  int64_t total_iterations = 0;  // of the training, as planned now
};

// How a collective (Client::AllReduceAsync, BroadcastAsync) may use its
// buffer.
struct CollectiveOptions {
  // The buffer is scratch memory the caller refills for every op (a
  // staging area): the daemon may run the collective in it directly,
  // without the two copies through a buffer of its own (it does so when it
  // has one worker), so a failed op may leave it changed.
  bool scratch = false;
};

namespace internal {
class FutureState;
}  // namespace internal

// The result of an asynchronous op. Copyable handle; thread-safe.
class Future {
 public:
  // An already failed future (FailedPrecondition "empty future").
  Future();
  explicit Future(std::shared_ptr<internal::FutureState> state);

  // True once the op finished (non-blocking).
  bool Poll() const;
  // The op's status; DeadlineExceeded (naming the op) if it has not
  // finished by then. The op goes on; Wait again or drop the future.
  absl::Status Wait(absl::Duration timeout) const;
  absl::Status Wait(absl::Time deadline) const;
  // Runs `callback(status)` once the op finished: at once, on this thread,
  // if it already has; otherwise on the client's reader thread.
  void Then(std::function<void(const absl::Status&)> callback) const;

 private:
  // Shared with the client's reader thread, which completes it.
  std::shared_ptr<internal::FutureState> state_;
};

class Connection;

class Client {
 public:
  // Connects to the daemon, hands it the pool and learns the job. Retries
  // until options.timeout while the socket does not exist or refuses.
  // Errors: InvalidArgument (options), Unavailable (daemon not reachable),
  // AlreadyExists (worker index taken), ResourceExhausted (pool).
  static absl::StatusOr<std::unique_ptr<Client>> Connect(
      const ClientOptions& options);

  // Closes the connection; unfinished futures fail with Unavailable.
  // Returns once the daemon let go of this worker's index (at most 2 s),
  // so that a worker with the same index may connect right after.
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // The daemon's rank, the number of daemons, this daemon's workers, and
  // (after the declarations ended) every worker of the job.
  int rank() const;
  int group_size() const;
  int local_workers() const;
  int total_workers() const;
  int worker_index() const;
  // The daemon's data-plane address.
  const std::string& daemon_address() const;
  // The run this worker takes part in: 0 until its declarations ended
  // (unless it resumes a running run, known at Connect).
  uint64_t run_id() const;
  // The first step this worker pushes (and the parameter version it pulls
  // first): 0 in a new run; when it took the place of a worker that left a
  // running run, the step that worker had reached. Final once the
  // declarations ended (after the first data op).
  int64_t first_step() const;
  // When this worker took the place of one that left a running run: the
  // all-reduces and barriers that worker completed after its last step
  // (first_step() - 1), which this one must not issue again (e.g. an
  // evaluation at an epoch's end); 0 otherwise.
  int resumed_collectives() const;
  // The job's training mode: "sync_sgd", "async_sgd", "parameter_server",
  // "sync_easgd", "async_easgd", "async_measgd", "hogwild_easgd",
  // "round_robin_easgd" (starling-coordinator --mode), and the run's staleness
  // bound: in async_sgd the parameters a pull for step t returns include every
  // update of the steps before t - staleness (the daemons hold the pull
  // until they do); 0 in the other modes.
  std::string mode() const;
  int staleness() const;
  // The job's settings (starling-coordinator's flags), for a worker's own
  // updates in the EASGD modes. elastic_alpha depends on total_workers():
  // final after the declarations ended.
  struct JobSettings {
    std::string mode;
    std::string optimizer;
    double learning_rate = 0;
    // starling-coordinator --parameter_count: the elements every run's
    // tensors must add up to; 0 accepts any.
    uint64_t parameter_count = 0;
    // EASGD modes only (0 otherwise): steps between elastic exchanges;
    // the moving rate alpha = beta / total workers; async_measgd's
    // Nesterov momentum delta.
    int elastic_tau = 0;
    double elastic_alpha = 0;
    double elastic_momentum = 0;
    bool elastic = false;
  };
  JobSettings job() const;

  // Declares a tensor. InvalidArgument for an empty name, a negative
  // dimension, a name declared twice, or a declaration other than another
  // worker's (see the file comment); FailedPrecondition after the
  // declarations ended.
  absl::Status DeclareTensor(absl::string_view name, std::vector<int64_t> shape,
                             DataType dtype);

  // A zeroed float buffer in the pool: `elements` long, or sized for the
  // declared tensor `name`. ResourceExhausted when the pool is full.
  absl::StatusOr<absl::Span<float>> Allocate(size_t elements);
  absl::StatusOr<absl::Span<float>> AllocateTensor(absl::string_view name);
  // A zeroed 16-bit buffer for a float16 or bfloat16 tensor (AllocateTensor
  // is for float32 ones: InvalidArgument names the one to use).
  absl::StatusOr<absl::Span<uint16_t>> AllocateTensor16(absl::string_view name);

  // The initial parameters of the run (version 0), from this worker: call
  // it after the declarations and before the first push, pull, all-reduce
  // or barrier; the buffers must stay as they are until that op returns.
  // When the run begins every daemon takes them (tensors left out, and
  // every tensor when no worker gave any, start at zero), so the other
  // workers simply pull version 0; a worker that takes a missing worker's
  // place later pulls the current parameters. Every worker that sets them
  // must set the same, bit for bit: the run does not begin otherwise (the
  // error names the workers, or the ranks, that differ). InvalidArgument
  // for a tensor not declared or a buffer of another size or outside the
  // pool; FailedPrecondition once this worker's declarations ended.
  absl::Status SetInitialParameters(const std::vector<Tensor>& values);
  // The same, offered instead: the run takes the first offer in (rank,
  // worker index) order, as a broadcast from rank 0 does (Horovod's
  // broadcast_parameters), unless some worker set them
  // (SetInitialParameters); offers that differ are no error.
  absl::Status OfferInitialParameters(const std::vector<Tensor>& values);

  // Gradients of `step` (see the file comment). Each buffer must be in the
  // pool and have its tensor's size; a tensor left out counts as zeros.
  // The daemon reads the buffers in place until the op completes: do not
  // write them before.
  absl::Status PushGradients(int64_t step,
                             const std::vector<Tensor>& gradients);
  Future PushGradientsAsync(int64_t step, const std::vector<Tensor>& gradients);

  // Part of `step`'s gradients, as backward produces them (last layer
  // first). The step's gradients are complete once every declared tensor
  // was pushed for it, in one part or another. Each bucket (see
  // ClientOptions::bucket_bytes) is sent to the daemon as soon as all its
  // tensors were pushed and the buckets before it were sent, and a daemon
  // starts reducing a bucket across the group as soon as all its local
  // workers pushed it, so communication overlaps the rest of backward
  // (Horovod's tensor fusion, PyTorch DDP's gradient buckets). The future
  // completes when every bucket holding one of `gradients` was reduced
  // (the last one: when the step was applied). InvalidArgument for a
  // tensor pushed twice in a step, or pushed for a step while an earlier
  // step is incomplete.
  Future PushGradientsPartAsync(int64_t step,
                                const std::vector<Tensor>& gradients);

  // What the work of one step cost this worker: `compute` (forward and
  // backward) of `step` (the whole step, waits included). Sent with the
  // next push; the daemon exports the sums and their ratio
  // (starling_node_worker_compute_seconds_total,
  // starling_node_worker_step_seconds_total, starling_node_compute_ratio).
  void ReportStepTimes(absl::Duration compute, absl::Duration step);

  // What training achieved: `samples` examples trained since the last
  // report, and the worker's latest loss and accuracy (a fraction, 0..1),
  // each if known. Sent with the next push; the daemon exports the sum of
  // samples and the mean over its workers of their last loss and accuracy
  // (starling_node_worker_samples_total, starling_node_worker_loss,
  // starling_node_worker_accuracy), which the training dashboard charts.
  // InvalidArgument, recording nothing, for a negative sample count or an
  // accuracy outside 0..1 (NaN included), which the daemon would refuse
  // with the next push. A loss may be anything (NaN: training diverged).
  absl::Status ReportProgress(int64_t samples, std::optional<double> loss,
                              std::optional<double> accuracy = std::nullopt);

  // Writes the parameters after `version` updates into `parameters`.
  absl::Status PullParameters(int64_t version,
                              const std::vector<Tensor>& parameters);
  Future PullParametersAsync(int64_t version,
                             const std::vector<Tensor>& parameters);
  // The version (updates applied) the last completed pull returned: in
  // async_sgd, `step - last_pulled_version()` is the staleness of the
  // parameters for `step`; -1 before any pull.
  int64_t last_pulled_version() const;

  // The data this worker reads in the next K iterations from
  // `next_iteration` (the coordinator's schedule, fetched by the daemon
  // once per K iterations for all its workers). Unavailable when the
  // coordinator cannot be reached; FailedPrecondition before the run.
  absl::StatusOr<Schedule> GetSchedule(int64_t next_iteration);

  // Zero-copy reads of the parameters (sync modes). At the end of the
  // declarations the daemon hands this worker its parameter memory (a
  // sealed memfd: no writable mapping of it can be made), which the client
  // maps read-only. ParametersView waits for `version` updates exactly as
  // PullParameters does (bounded by ClientOptions::timeout; every worker
  // of the job must push each step), then returns the daemon's copy of
  // `tensor` in place: no bytes are copied, nothing is written to the pool.
  //
  //   absl::Span<const float> w = *client->ParametersView(step, "w");
  //   ... compute g from w ...
  //   client->PushGradients(step, {{"w", g}});   // w is invalid from here
  //
  // Lifetime: a view of version v holds version v until this worker's
  // PushGradients(v) (the step that overwrites the parameters starts only
  // after every local worker pushed), and not past Finish() or the
  // Client's destruction. Use it before pushing, or copy what must last.
  // CheckParametersView(v) says whether the memory still holds version v.
  //
  // Errors: FailedPrecondition when the daemon holds no parameters to
  // share (parameter-server mode, whose shards change at any time; before
  // a run; an empty model), or when the parameters hold another version
  // than `version` by the time it is ready (a view of an older version
  // than the current one: the message names both); InvalidArgument for a
  // tensor not declared; DeadlineExceeded as PullParameters. Float32
  // tensors only (what the daemon holds).
  absl::StatusOr<absl::Span<const float>> ParametersView(
      int64_t version, absl::string_view tensor);
  // OK while the shared parameters hold `version`; FailedPrecondition
  // naming the version they hold (or the one being written over them)
  // otherwise, or why there is no view (as ParametersView). Never blocks.
  absl::Status CheckParametersView(int64_t version) const;

  // data = the sum of every worker's data (same length on every worker).
  absl::Status AllReduce(absl::Span<float> data);
  Future AllReduceAsync(absl::Span<float> data);

  // Returns once every worker of the job entered the barrier.
  absl::Status Barrier();

  // Collectives on any element type, over every worker of the job, in
  // place on `data` (inside this worker's pool, a whole number of `type`
  // elements, the same length, type and op on every worker: a difference
  // fails the op on every worker, naming both calls). Workers are
  // numbered by slot(). The Future completes when this worker's `data`
  // holds the result; a failed op leaves it as it was (unless
  // CollectiveOptions::scratch).
  // - AllReduce: data = op over every worker's data, element-wise. kSum of
  //   integers wraps modulo 2^bits; kAverage is the sum divided by
  //   total_workers() (integers truncate toward zero).
  // - Broadcast: data = the data of the worker in slot `root`.
  // - AllGather: data is total_workers() equal blocks; each worker supplies
  //   block slot(), and every worker ends with every block.
  // - ReduceScatter: data is total_workers() equal blocks; block slot()
  //   becomes op over every worker's block slot(); the other blocks stay
  //   as they were.
  // Broadcast, AllGather and ReduceScatter need every daemon to have as
  // many workers (FailedPrecondition naming the counts otherwise); a
  // length that total_workers() does not divide is InvalidArgument.
  // `options.scratch`: see CollectiveOptions.
  Future AllReduceAsync(absl::Span<std::byte> data, DataType type, ReduceOp op,
                        CollectiveOptions options = {});
  Future BroadcastAsync(absl::Span<std::byte> data, DataType type, int root,
                        CollectiveOptions options = {});
  Future AllGatherAsync(absl::Span<std::byte> data, DataType type);
  Future ReduceScatterAsync(absl::Span<std::byte> data, DataType type,
                            ReduceOp op);
  // This worker's place among every worker of the job, 0 ..
  // total_workers() - 1: rank() * local_workers() + worker_index() (every
  // daemon having as many workers). Final once the declarations ended.
  int slot() const;

  // After an op failed because the group of daemons re-formed around a
  // lost daemon ("run R stopped at step S: ...; reconnect to resume"):
  // reconnects to this worker's daemon (the same pool: every buffer stays
  // valid), declares the run's tensors again and learns where the run goes
  // on. The daemons carry a run of the synchronous step on from the newest
  // step every shard can be brought to, which includes every step a push
  // returned for (acknowledged updates are never lost); steps this worker
  // pushed that had not returned may be rolled back, and are to be pushed
  // again: `rolled_back` says how many (the event is logged by the
  // trainers and counted in rolled_back_steps()). rank(), group_size() and
  // total_workers() are the new group's afterwards. The shard owners'
  // modes (parameter server, asynchronous EASGD) apply each push at once
  // and keep no step: their runs go on with each shard as its owner (or,
  // for a lost owner, its buddy's replica) holds it, which includes every
  // push that returned; a worker goes on from its own next step
  // (last_pushed + 1) and nothing is rolled back. The data schedule
  // (GetSchedule) is re-planned for it. When the group re-forms again
  // while this worker rejoins (another daemon lost or taken in meanwhile:
  // the daemon answers Unavailable), it rejoins again, until the options'
  // timeout.
  // FailedPrecondition when the run did not go on (the coordinator failed
  // it: the message says why; this worker may declare the next run), or
  // when it still runs in the same group after 5 s of asking (no daemon
  // was lost: the error this worker saw was its own, e.g. a round-robin
  // turn that never came);
  // Connect's errors otherwise, after which the client can only be
  // destroyed.
  struct Rejoined {
    uint64_t run_id = 0;
    // Pull version next_step, then push it.
    int64_t next_step = 0;
    // The last step this worker pushed before (-1: none).
    int64_t last_pushed = -1;
    // Pushed steps the group rolled back: last_pushed + 1 - next_step, or 0.
    int64_t rolled_back = 0;
    // The version the daemons went on at: the step (synchronous modes), or
    // the shard owners' update count, from which round-robin EASGD's
    // turns are counted (0 in the other shard owners' modes).
    int64_t group_version = 0;
  };
  absl::StatusOr<Rejoined> Rejoin();
  // Steps rolled back over every Rejoin of this client.
  int64_t rolled_back_steps() const;

  // This worker is done with the run: returns once every worker of the job
  // called Finish() (a barrier) and the run ended. Declarations after it
  // begin the next run. Bounded by ClientOptions::timeout.
  absl::Status Finish();

 private:
  explicit Client(std::unique_ptr<Connection> connection);
  // SetInitialParameters, or OfferInitialParameters with `offered`.
  absl::Status InitialParameters(const std::vector<Tensor>& values,
                                 bool offered);
  // PushGradientsAsync (complete_step: tensors left out are zeros) and
  // PushGradientsPartAsync.
  Future Push(int64_t step, const std::vector<Tensor>& gradients,
              bool complete_step);
  // The collectives: `collective` with its kind (and op or root) set.
  Future Collective(proto::CollectiveRequest collective,
                    absl::Span<std::byte> data, DataType type);

  std::unique_ptr<Connection> connection_;
  // The step whose parts are being pushed, and step times not sent yet.
  struct Pending;
  std::unique_ptr<Pending> pending_;
  // The highest step pushed (sent), and steps rolled back by Rejoin.
  std::atomic<int64_t> last_pushed_{-1};
  std::atomic<int64_t> rolled_back_{0};
};

}  // namespace client
}  // namespace starling

#endif  // STARLING_CLIENT_CLIENT_H_
