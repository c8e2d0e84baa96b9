// PsEngine: parameter-server mode (JobConfig MODE_PARAMETER_SERVER,
// DESIGN.md "Training modes"). A push is split by the shard map and each
// part goes to the daemon owning that range, which applies it at once with
// its optimizer: one update per push, no waiting for other workers (the
// optimizer's gradient scale is 1 / total workers, set at commit, so one
// push from every worker moves the shard as far as one synchronous step);
// a pull reads every owner's current values. Nothing is synchronised
// across workers: pulls see whatever the shards hold.
//
// Wire (transport control messages, so version 1 limits a shard to
// max_control_bytes, 1 MiB by default: 262,140 floats; larger shards are
// refused with InvalidArgument):
//   request, tag kPsRequestTag:   u32 kind (1 push, 2 pull), u32 reply tag,
//                                 u64 request id, u64 run id, then for a
//                                 push the owner's shard of the gradient as
//                                 float32 (little-endian host order; the
//                                 group is one architecture)
//   reply, tag = the reply tag:   u32 absl::StatusCode, u32 message bytes,
//                                 u64 request id, the message, then for a
//                                 pull the shard's parameters as float32
// The reply tag is kPsReplyTagBase + the local worker index, so each
// worker's reader thread owns its (peer, tag) pair and needs no lock; a
// reply whose request id is not the one awaited (a late answer to a call
// that timed out) is dropped, so it can never answer a later call. A
// request for another run than the owner's running one is refused.
// Each daemon serves requests on one thread per peer.
//
// Thread-safe. Threads: one server thread per peer (Start/Stop); Push and
// Pull run on the workers' reader threads. The shard and optimizer are
// touched under `mu_` (compute only, no I/O under it).
#ifndef STARLING_SERVER_NODE_PS_ENGINE_H_
#define STARLING_SERVER_NODE_PS_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/worker.pb.h"
#include "server/node/node_metrics.h"
#include "server/node/run.h"
#include "server/node/sync_engine.h"
#include "server/node/worker_session.h"
#include "server/shard/optimizer/optimizer.h"
#include "server/shard/shard_store.h"
#include "server/transport/transport.h"

namespace starling {
namespace node {

inline constexpr uint32_t kPsRequestTag = 2;
inline constexpr uint32_t kPsReplyTagBase = 1024;

struct PsEngineOptions {
  absl::Duration timeout = absl::Seconds(30);
  std::string self;
};

class PsEngine {
 public:
  // Pointers borrowed; they must outlive the engine. `runs` provides the
  // running run (layout, shard, optimizer).
  PsEngine(PsEngineOptions options, transport::Transport* transport,
           const SyncEngine* runs, NodeMetrics* metrics);
  ~PsEngine();
  PsEngine(const PsEngine&) = delete;
  PsEngine& operator=(const PsEngine&) = delete;

  void Start();
  void Stop();

  // Both answer the worker themselves.
  void Push(const WorkerHandle& worker, const proto::WorkerRequest& request);
  void Pull(const WorkerHandle& worker, const proto::WorkerRequest& request);

  // Updates applied to this daemon's shard in the running run.
  int64_t updates() const;

 private:
  absl::Status DoPush(const WorkerHandle& worker, Run& run,
                      const proto::PushGradientsRequest& push);
  absl::Status DoPull(const WorkerHandle& worker, Run& run,
                      const proto::PullParametersRequest& pull);
  // Pushes `flat` to (kPush) or fills it from (kPull) every owner.
  absl::Status Exchange(const WorkerHandle& worker, Run& run, uint32_t kind,
                        absl::Span<float> flat);
  // Sends one request of `kind` to `owner` (the reply is collected by
  // Exchange). `out` is where a pull's part will land (size check only).
  absl::Status Call(int owner, uint32_t kind, uint32_t reply_tag,
                    uint64_t request_id, uint64_t run_id,
                    absl::Span<const float> payload, absl::Span<float> out);
  static absl::Status ApplyLocal(Run& run, absl::Span<const float> grads);
  static void CopyLocal(Run& run, absl::Span<float> out);
  void Serve(int peer);

  const PsEngineOptions options_;
  transport::Transport* const transport_;
  const SyncEngine* const runs_;
  NodeMetrics* const metrics_;
  std::vector<std::thread> servers_;
  // relaxed is enough: servers poll it between bounded waits.
  std::atomic<bool> stop_{false};
  // relaxed: only uniqueness matters.
  std::atomic<uint64_t> next_request_id_{1};
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_PS_ENGINE_H_
