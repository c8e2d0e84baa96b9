// PsEngine: the shard owners, the RunEngine of parameter-server mode
// (JobConfig MODE_PARAMETER_SERVER, DESIGN.md "Training modes") and the
// asynchronous EASGD variants. Its runs are PsRuns: one flat shard per
// daemon (store->shard_parameters()), one gradient bucket, no views of the
// parameters (they change at any time), and the count of updates applied
// to this daemon's shard. A push is split by the shard map and each
// part goes to the daemon owning that range, which applies it at once with
// its optimizer: one update per push, no waiting for other workers (the
// optimizer's gradient scale is 1 / total workers, set at commit, so one
// push from every worker moves the shard as far as one synchronous step);
// a pull reads every owner's current values. Nothing is synchronised
// across workers: pulls see whatever the shards hold.
//
// A part (one owner's range of a push or pull) of up to `eager_bytes`
// travels inside the control messages (push: in the request, pull: in the
// reply): small tensors are spared a round trip and two registrations.
// Larger parts move on the data plane, one-sided writes into registered
// regions named by ids used once, and have no size limit. The requests,
// replies, exchanges and region ids: ps_wire_format.md (the code:
// ps_wire.h). An owner serves each peer on one thread with one receive
// buffer, and applies pushes under the run's `mu`: concurrent pushes
// from several workers and peers never share a buffer.
//
// The asynchronous EASGD variants run on this engine too (the pushes are
// elastic differences, the optimizer easgd adds them to the centre):
//   hogwild: pushes are applied without `mu` (shard::AddRelaxed) and
//            pulls read without it (shard::CopyRelaxed): concurrent pushes
//            from several peers and local workers overlap, an element may
//            lose one of two simultaneous additions, and a pull may see
//            part of a push.
//   round_robin: a pull for version v > 0 first waits until every owner
//            applied v pushes (kind 3 requests ask an owner its count;
//            the requester polls, so no owner thread ever waits for a
//            turn): worker g's exchange k pulls version k * workers + g,
//            so exchanges happen one at a time, in worker order.
//
// Replicas and continuation (ps_run.h, ps_continuation.h): with a buddy
// distance, each owner sends every update it applied to its buddy and
// answers the push only once the buddy applied it too; a run stopped for
// a peer's loss goes on in the re-formed group from what the survivors
// hold (their shards, and the replicas of the lost ones). Round-robin's
// turns go on counted from the update count every shard goes on at (the
// continuation's version; the workers number their exchanges from it).
//
// Deadlines: a push or pull takes at most `timeout` (then the owners that
// did not answer are named); an owner waits at most `timeout` for a run its
// peer began an instant earlier and for the gradient after "ready". Writes
// not finished by then abort their peer (Transport::AbortPeer), so that no
// buffer is freed under a write.
//
// Thread-safe. Threads: one server thread per peer and, with a replica, one
// replica thread for the owner it replicates (Start/Stop); Push and
// Pull run on the workers' reader threads. The shard and optimizer are
// touched under the run's `mu` (compute only, no I/O under it). The
// engine's own lock, `mu_`, guards only which run is running (taken under
// the manager's lock in RunBegan and RunEnded, never the reverse).
#ifndef STARLING_SERVER_NODE_PS_PS_ENGINE_H_
#define STARLING_SERVER_NODE_PS_PS_ENGINE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/worker.pb.h"
#include "server/collective/communicator.h"
#include "server/node/ps/ps_run.h"
#include "server/node/ps/ps_wire.h"
#include "server/node/run/run.h"
#include "server/node/run/run_engine.h"
#include "server/node/run/run_factory.h"
#include "server/node/run/run_manager.h"
#include "server/node/telemetry/node_metrics.h"
#include "server/node/worker/worker_session.h"
#include "server/transport/completion.h"
#include "server/transport/transport.h"

namespace starling {
namespace node {

struct PsEngineOptions {
  // Bound on one push or pull, and on each wait of the owner's side.
  absl::Duration timeout = absl::Seconds(30);
  // Parts up to this many bytes travel inside control messages (at most
  // the transport's max_control_bytes() less the headers); larger ones as
  // one-sided writes.
  size_t eager_bytes = size_t{64} << 10;
  // "rank 2 (127.0.0.1:29502)": this daemon in messages.
  std::string self;
  // MODE_HOGWILD_EASGD and MODE_ROUND_ROBIN_EASGD (the file comment).
  bool hogwild = false;
  bool round_robin = false;
  // Each rank's shard is replicated on rank + buddy_distance (ps_run.h);
  // 0: no replicas (and a lost daemon ends the run).
  int buddy_distance = 0;
};

class PsEngine : public RunEngine {
 public:
  // Pointers borrowed; they must outlive the engine. `runs` tells which
  // run a worker takes part in.
  PsEngine(PsEngineOptions options, RunManager* runs,
           transport::Transport* transport, collective::Communicator* comm,
           NodeMetrics* metrics);
  ~PsEngine() override;
  PsEngine(const PsEngine&) = delete;
  PsEngine& operator=(const PsEngine&) = delete;

  // RunEngine.
  void Start() override;
  // Joins the server threads; pushes and pulls in flight end within a wait
  // slice (FailedPrecondition), later ones fail at once.
  void Stop() override;
  // One flat shard is updated: one bucket.
  uint64_t BucketBytes(uint64_t) const override { return 0; }
  absl::StatusOr<std::shared_ptr<Run>> CreateRun(
      const std::vector<proto::TensorSpec>& tensors,
      const RunFactoryOptions& options) override;
  bool SharesParameters() const override { return false; }
  int BucketsPerStep(const Run&) const override { return 1; }
  std::vector<std::pair<uint64_t, uint64_t>> OwnedRanges(
      const Run& run) const override;
  std::string DescribeRun(const Run& run) const override;
  void RunBegan(const std::shared_ptr<Run>& run) override;
  // Each buddy's replica starts from the initial parameters.
  void ParametersReady(Run& run) override;
  void RunEnded(const Run& run) override;
  // Updates applied to this daemon's shard.
  int64_t Steps(const Run& run) const override;
  // Both answer the worker themselves.
  void Push(const WorkerHandle& worker,
            const proto::WorkerRequest& request) override;
  void Pull(const WorkerHandle& worker,
            const proto::WorkerRequest& request) override;
  // Pushes are not rounds here: Internal.
  absl::Status PushRound(std::vector<Round>& rounds, Run& run,
                         bool* applied) override;
  // With replicas, a run stopped for a peer's loss goes on in the
  // re-formed group: each lost shard from its buddy's replica, the
  // shards re-cut for the new group, new buddies (ps_continuation.cc).
  bool MayContinue(const Run& run, const absl::Status& why) const override;
  absl::StatusOr<std::shared_ptr<Run>> ContinueRun(
      const CarriedRun& carried, const RunFactoryOptions& options,
      const collective::CallOptions& call, int64_t* version) override;
  void RunContinued(const std::shared_ptr<Run>& run, int64_t version) override;

 private:
  // An exchange with the owners failed with `status`: where it is a peer's
  // loss (an owner or its buddy unreachable or stopped), the run fails
  // here and on the peers, suspended where it may go on (MayContinue), so
  // that the workers' rejoins wait for the re-formed group.
  void OnExchangeFailed(PsRun& run, const absl::Status& status);
  // The run `worker` takes part in, or why none.
  absl::StatusOr<std::shared_ptr<PsRun>> RunOf(const WorkerHandle& worker);
  // Pushes (kind 1) the worker's `slices` or pulls (kind 2) into them.
  absl::Status Move(
      const WorkerHandle& worker, PsRun& run, uint32_t kind,
      const google::protobuf::RepeatedPtrField<proto::PoolSlice>& slices);
  // Pushes `flat` to (kind 1) or fills it from (kind 2) every owner.
  absl::Status Exchange(const WorkerHandle& worker, PsRun& run, uint32_t kind,
                        absl::Span<float> flat);
  // Exchange's parts: which owners get a request and how each part travels
  // (registers a pull's receive region); the requests; each owner's answer
  // (and the push's gradient write, the pull's part written); a pulled
  // part's landing checked against the owner's range.
  struct Exchanging;
  absl::Status PlanExchange(const WorkerHandle& worker, PsRun& run,
                            Exchanging& x);
  void SendRequests(Exchanging& x);
  void AwaitAnswers(Exchanging& x);
  absl::Status AwaitPulledPart(const Exchanging& x, int owner);
  // Waits for the reply to `request_id` from `owner` at `stage` (1 ready,
  // 2 done), dropping stale ones; an inline pull's values go to `values`.
  // Returns the owner's answer, and sets `*answered`, when a reply came (an
  // error is final at either stage); otherwise why none did
  // (DeadlineExceeded, the peer's status, or FailedPrecondition when
  // stopping).
  absl::Status AwaitReply(int owner, uint32_t reply_tag, uint64_t request_id,
                          uint32_t stage, absl::Span<float> values,
                          absl::Time deadline, bool* answered);
  // WaitForWrite in slices, so that Stop() is noticed.
  absl::StatusOr<transport::WriteNotice> AwaitWrite(
      const transport::WriteMatch& match, absl::Time deadline);
  // Waits for the writes counted by `done` to `peer`; past `deadline`
  // aborts the peer, which finishes them. Either way they are over (their
  // buffers free) when it returns.
  absl::Status AwaitWrites(int peer, transport::Completion& done,
                           absl::Time deadline);
  // Applies `grads` to this daemon's shard as update `*update` (counted
  // from 1); FailedPrecondition once stopping (the shard may be handed to
  // a continuation).
  absl::Status ApplyLocal(PsRun& run, absl::Span<const float> grads,
                          int64_t* update);
  // Owner side of a replica: sends update `update` (its `grads`) to the
  // shard's buddy and waits for it to be applied there; answers come on
  // `reply_tag` (one per calling thread). OK at once without a buddy.
  absl::Status Replicate(PsRun& run, int64_t update,
                         absl::Span<const float> grads, uint32_t reply_tag);
  // The reply tag for the replication answers of the thread serving
  // `peer` and of local worker `worker`.
  uint32_t ServerReplicaTag(int peer) const;
  uint32_t WorkerReplicaTag(int worker) const;
  void CopyLocal(PsRun& run, absl::Span<float> out);
  static int64_t LocalUpdates(const PsRun& run);
  // round_robin: returns once every owner applied `updates` pushes of the
  // run (polling, bounded by the timeout: DeadlineExceeded naming the
  // worker whose turn it is and the owner that lags).
  absl::Status AwaitTurn(const WorkerHandle& worker, PsRun& run,
                         int64_t updates);
  // Owner `owner`'s count of applied pushes (a kind 3 request).
  absl::StatusOr<int64_t> RemoteUpdates(const WorkerHandle& worker, PsRun& run,
                                        int owner, absl::Time deadline);

  // A request received from a peer: its bytes, header (DecodeRequest's
  // status) and the values after the header.
  struct Received {
    std::vector<std::byte> bytes;
    PsRequest request;
    absl::Status status;
    absl::Span<const std::byte> body() const {
      return absl::MakeConstSpan(bytes).subspan(
          std::min(bytes.size(), kRequestBytes));
    }
  };
  // The next request from `peer` on `tag`, waiting in slices; nullopt once
  // stopping or the peer's connection ended (logged, naming `thread`).
  std::optional<Received> NextRequest(int peer, uint32_t tag,
                                      const char* thread);
  // Owner side: serves `peer`'s requests until Stop().
  void Serve(int peer);
  // Buddy side: applies `owner`'s updates to the replica until Stop().
  void ServeReplica(int owner);
  // One part of a replicated update into `run`'s replica; the updates it
  // made whole and next in line are applied, their answers added to
  // `answers` (sent by the caller, holding no lock).
  struct ReplicaAnswer {
    uint64_t request_id;
    uint32_t reply_tag;
    absl::Status status;
  };
  absl::Status TakeReplicated(int owner, const PsRequest& request,
                              absl::Span<const std::byte> values, PsRun& run,
                              std::vector<ReplicaAnswer>* answers);
  // Applies update replica.updates + 1 (`grads`) to `replica` as the owner
  // did, and adds the answer for `request_id` on `reply_tag`.
  static void ApplyNext(OwnerReplica& replica, absl::Span<const float> grads,
                        uint64_t request_id, uint32_t reply_tag,
                        std::vector<ReplicaAnswer>* answers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(replica.mu);
  // The run `run_id` once it runs here (waiting up to `timeout` for it to
  // begin), or FailedPrecondition.
  absl::StatusOr<std::shared_ptr<PsRun>> AwaitRun(uint64_t run_id);
  // Handle one request with `buffer` (reused per peer); the status
  // returned is the "done" reply's. A push sends "ready" unless `gradient`
  // came inline; an inline pull sets `*values` (a view of `buffer`).
  absl::Status ServePush(int peer, const PsRequest& request,
                         absl::Span<const std::byte> gradient, PsRun& run,
                         std::vector<float>& buffer);
  absl::Status ServePull(int peer, const PsRequest& request, PsRun& run,
                         std::vector<float>& buffer,
                         absl::Span<const float>* values);
  absl::Status SendReply(int peer, uint32_t reply_tag, uint64_t request_id,
                         uint32_t stage, const absl::Status& status,
                         absl::Span<const float> values = {});
  // The rank whose shard rank `rank` of `size` replicates.
  int ReplicatedRank(int rank, int size) const;
  bool stopping() const;
  absl::Status Stopped() const;  // FailedPrecondition naming this daemon

  const PsEngineOptions options_;
  RunManager* const runs_;
  transport::Transport* const transport_;
  collective::Communicator* const comm_;
  NodeMetrics* const metrics_;
  absl::Mutex mu_;
  // The running run (RunBegan to RunEnded), or null; signalled when it
  // changes.
  std::shared_ptr<PsRun> run_ ABSL_GUARDED_BY(mu_);
  absl::CondVar run_changed_;
  std::vector<std::thread> servers_;
  // relaxed is enough: waits poll it between bounded slices.
  std::atomic<bool> stop_{false};
  // relaxed: only uniqueness matters.
  std::atomic<uint64_t> next_request_id_{1};
  // Region id counters (see the file comment); relaxed: only uniqueness
  // matters, and gaps from a race fill within a moment.
  std::atomic<uint64_t> next_push_region_{0};
  std::atomic<uint64_t> next_pull_region_{0};
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_PS_PS_ENGINE_H_
