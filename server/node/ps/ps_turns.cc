#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/base/status_macros.h"
#include "server/collective/shard_layout.h"
#include "server/node/ps/ps_engine.h"
#include "server/node/ps/ps_wire.h"

// PsEngine's round-robin turns (ps_engine.h, "round_robin").
namespace starling {
namespace node {

int64_t PsEngine::LocalUpdates(const PsRun& run) {
  absl::MutexLock lock(&run.mu);
  return run.updates;
}

absl::StatusOr<int64_t> PsEngine::RemoteUpdates(const WorkerHandle& worker,
                                                PsRun& run, int owner,
                                                absl::Time deadline) {
  PsRequest request;
  request.kind = kUpdates;
  request.reply_tag = kPsReplyTagBase + worker.index;
  request.request_id = next_request_id_.fetch_add(1, std::memory_order_relaxed);
  request.run_id = run.id;
  std::vector<std::byte> message(kRequestBytes);
  std::memcpy(message.data(), &request, kRequestBytes);
  STARLING_RETURN_IF_ERROR(
      transport_->SendControl(owner, kPsRequestTag, message));
  float values[sizeof(int64_t) / sizeof(float)] = {};
  bool answered = false;
  STARLING_RETURN_IF_ERROR(
      AwaitReply(owner, request.reply_tag, request.request_id, kDone,
                 absl::MakeSpan(values), deadline, &answered));
  int64_t count = 0;
  std::memcpy(&count, values, sizeof(count));
  return count;
}

// Polls with a growing pause (50 us up to 2 ms): a turn usually comes within
// one exchange of another worker, and the owners answer from memory. Each
// count request has a timeout of its own (an owner that does not answer
// one is named as such); the turn's deadline bounds when polling stops.
absl::Status PsEngine::AwaitTurn(const WorkerHandle& worker, PsRun& run,
                                 int64_t updates) {
  const int rank = transport_->rank();
  const int size = transport_->size();
  const collective::ShardLayout shards(run.layout.total_elements, size);
  const absl::Time deadline = absl::Now() + options_.timeout;
  absl::Duration pause = absl::Microseconds(50);
  int lagging = rank;
  int64_t lagging_count = 0;
  while (true) {
    if (stopping()) return Stopped();
    bool all = true;
    for (int owner = 0; owner < size && all; ++owner) {
      int64_t count = 0;
      if (owner == rank) {
        count = LocalUpdates(run);
      } else if (shards.Size(owner) == 0) {
        continue;  // gets no pushes
      } else {
        absl::StatusOr<int64_t> remote =
            RemoteUpdates(worker, run, owner, absl::Now() + options_.timeout);
        if (!remote.ok()) {
          // An owner that does not answer is a peer's loss, as in a push
          // (a turn that never comes, below, is a worker's).
          const absl::Status failed =
              Annotate(remote.status(),
                       absl::StrCat("round-robin turn: asking shard owner ",
                                    transport_->PeerName(owner)));
          OnExchangeFailed(run, failed);
          return failed;
        }
        count = *remote;
      }
      if (count < updates) {
        all = false;
        lagging = owner;
        lagging_count = count;
      }
    }
    if (all) return absl::OkStatus();
    if (absl::Now() + pause >= deadline) break;
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(2));
  }
  const int workers = std::max(1, run.total_workers);
  return absl::DeadlineExceededError(absl::StrCat(
      "round-robin EASGD: exchange ", updates, " waits for worker number ",
      lagging_count % workers, " (of ", workers,
      ", numbered rank x local workers + index) to exchange first; shard "
      "owner ",
      lagging == rank ? options_.self : transport_->PeerName(lagging),
      " has applied ", lagging_count, " pushes, none within ",
      absl::FormatDuration(options_.timeout)));
}

}  // namespace node
}  // namespace starling
