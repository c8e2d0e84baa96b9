#include "server/node/run/worker_slots.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/logging.h"
#include "server/base/tensor_table.h"

namespace starling {
namespace node {

using SlotState = proto::WorkerStatus;

WorkerSlots::WorkerSlots(int local_workers, absl::Duration grace,
                         std::string self)
    : grace_(grace), self_(std::move(self)), slots_(local_workers) {}

std::string WorkerSlots::WorkerName(const WorkerHandle& worker) const {
  return absl::StrCat("local worker '", worker.name, "' (index ", worker.index,
                      worker.pid != 0 ? absl::StrCat(", pid ", worker.pid) : "",
                      ") of ", self_);
}

absl::StatusOr<WorkerSlots::Attached> WorkerSlots::Attach(
    const WorkerHandle& worker, const Run* running, absl::Time now,
    proto::HelloReply* reply) {
  Slot& slot = slots_[worker.index];
  reply->set_grace_ms(absl::ToInt64Milliseconds(grace_));
  if (slot.connected && worker.pid != 0 && slot.worker.pid == worker.pid &&
      slot.worker.session != worker.session) {
    // The same process connects again (Client::Rejoin closes its
    // connection first, and this daemon may not have read that close
    // yet): its earlier connection is over, as if it had closed.
    const WorkerHandle earlier = slot.worker;
    Detach(earlier, running, now);
  }
  switch (slot.state) {
    case SlotState::STATE_ATTACHED:
      return absl::AlreadyExistsError(absl::StrCat(
          "worker index ", worker.index, " on ", self_, " is taken by '",
          slot.worker.name, "'",
          slot.worker.pid != 0 ? absl::StrCat(" (pid ", slot.worker.pid, ")")
                               : ""));
    case SlotState::STATE_FINISHED:
      if (slot.connected) {
        return absl::AlreadyExistsError(absl::StrCat(
            "worker index ", worker.index, " on ", self_, " is taken by '",
            slot.worker.name, "', which is finishing run ", slot.run_id));
      }
      return absl::FailedPreconditionError(absl::StrCat(
          "worker index ", worker.index, " on ", self_,
          " already finished run ", slot.run_id,
          ", which is still running (other workers have not finished); "
          "attach again once it ends"));
    case SlotState::STATE_MISSING: {
      // Resume in place of the worker that left.
      const absl::Duration gone = now - slot.missing_since;
      slot.state = SlotState::STATE_ATTACHED;
      slot.connected = true;
      slot.worker = worker;
      slot.resuming = true;
      slot.resumed_declarations = 0;
      reply->set_run_id(slot.run_id);
      reply->set_next_step(slot.next_step);
      reply->set_collectives_done(slot.collectives_since_step);
      STARLING_LOG(INFO) << WorkerName(worker) << " resumes run " << slot.run_id
                         << " at step " << slot.next_step << " after "
                         << absl::FormatDuration(
                                absl::Trunc(gone, absl::Milliseconds(1)))
                         << " without a worker";
      return Attached::kResumed;
    }
    default:
      break;
  }
  slot.state = SlotState::STATE_ATTACHED;
  slot.connected = true;
  slot.worker = worker;
  slot.run_id = 0;
  slot.next_step = 0;
  slot.resuming = false;
  slot.queue.clear();
  reply->set_run_id(0);
  reply->set_next_step(0);
  return Attached::kNew;
}

WorkerSlots::Detached WorkerSlots::Detach(const WorkerHandle& worker,
                                          const Run* running, absl::Time now) {
  if (worker.index < 0 || worker.index >= size()) return Detached::kReplaced;
  Slot& slot = slots_[worker.index];
  if (slot.worker.session != worker.session) return Detached::kReplaced;
  slot.connected = false;
  const bool in_running_run =
      running != nullptr && slot.run_id == running->id && slot.run_id != 0;
  if (slot.state == SlotState::STATE_FINISHED) {
    // Its finish round stays queued: the worker is done with the run.
    return Detached::kFinished;
  }
  if (in_running_run) {
    // Its unconsumed requests go: a replacement sends them again.
    slot.queue.clear();
    slot.state = SlotState::STATE_MISSING;
    slot.missing_since = now;
    slot.resuming = false;
    STARLING_LOG(WARNING) << WorkerName(worker) << " left run " << slot.run_id
                          << " at step " << slot.next_step
                          << " without finishing; holding the run for "
                          << absl::FormatDuration(grace_)
                          << " for a worker with the same index";
    return Detached::kMissing;
  }
  // Before its run began (or after it ended): as if it never came.
  slot.queue.clear();
  slot.state = SlotState::STATE_UNSPECIFIED;
  slot.run_id = 0;
  return Detached::kGone;
}

absl::StatusOr<WorkerSlots::Declaring> WorkerSlots::Declare(
    const WorkerHandle& worker, const proto::TensorSpec& spec,
    const Run* running) {
  Slot& slot = slots_[worker.index];
  if (slot.worker.session != worker.session) {
    return absl::FailedPreconditionError("this worker was replaced");
  }
  if (slot.resuming && running != nullptr && slot.run_id == running->id) {
    // A replacement declares the run's tensors again, in order.
    const std::vector<TensorLayout::Entry>& tensors = running->layout.tensors;
    const size_t k = slot.resumed_declarations;
    if (k >= tensors.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", spec.name(), "' is one more than the ", tensors.size(),
          " tensors of run ", running->id, ", which this worker resumes"));
    }
    // The declaration has no bucket yet (the daemons set it): compare the
    // rest.
    proto::TensorSpec declared = spec;
    declared.set_bucket(tensors[k].spec.bucket());
    if (!proto::SameSpec(tensors[k].spec, declared)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", spec.name(), "' ", proto::DescribeSpec(spec),
          " is not tensor ", k, " of run ", running->id, " ('",
          tensors[k].spec.name(), "' ", proto::DescribeSpec(tensors[k].spec),
          "); a worker resuming a run declares the run's tensors in order"));
    }
    ++slot.resumed_declarations;
    return Declaring::kResumedRun;
  }
  if (running != nullptr && slot.run_id == running->id) {
    return absl::FailedPreconditionError(absl::StrCat(
        "tensor '", spec.name(), "' declared after run ", running->id,
        " began (its declarations ended with the first push, "
        "pull, all-reduce or barrier) on ",
        self_));
  }
  // Declaring for the next run (a slot of an ended run starts anew).
  slot.run_id = 0;
  slot.next_step = 0;
  return Declaring::kNextRun;
}

WorkerSlots::Slot* WorkerSlots::Find(const WorkerHandle& worker) {
  Slot& slot = slots_[worker.index];
  return slot.worker.session == worker.session ? &slot : nullptr;
}

const WorkerSlots::Slot* WorkerSlots::Find(const WorkerHandle& worker) const {
  const Slot& slot = slots_[worker.index];
  return slot.worker.session == worker.session ? &slot : nullptr;
}

void WorkerSlots::Enqueue(Round round) {
  Slot& slot = slots_[round.worker.index];
  if (round.request.kind_case() == proto::WorkerRequest::kFinish) {
    slot.state = SlotState::STATE_FINISHED;
  }
  slot.queue.push_back(std::move(round));
}

bool WorkerSlots::RoundReady() const {
  for (const Slot& slot : slots_) {
    if (slot.queue.empty()) return false;
  }
  return true;
}

std::vector<Round> WorkerSlots::TakeRound(int buckets) {
  std::vector<Round> rounds;
  for (Slot& slot : slots_) {
    rounds.push_back(std::move(slot.queue.front()));
    slot.queue.pop_front();
    const proto::WorkerRequest& request = rounds.back().request;
    if (request.kind_case() == proto::WorkerRequest::kCollective ||
        request.kind_case() == proto::WorkerRequest::kBarrier) {
      ++slot.collectives_since_step;
    }
    if (request.kind_case() == proto::WorkerRequest::kPushGradients) {
      slot.collectives_since_step = 0;
      if (request.push_gradients().bucket() >= buckets - 1) {
        ++slot.next_step;
        slot.next_bucket = 0;
      } else {
        slot.next_bucket = request.push_gradients().bucket() + 1;
      }
    }
  }
  return rounds;
}

absl::StatusOr<absl::Time> WorkerSlots::CheckGrace(absl::Time now) const {
  absl::Time earliest = absl::InfiniteFuture();
  for (const Slot& slot : slots_) {
    if (slot.state != SlotState::STATE_MISSING) continue;
    const absl::Time expiry = slot.missing_since + grace_;
    if (now < expiry) {
      earliest = std::min(earliest, expiry);
      continue;
    }
    return absl::UnavailableError(absl::StrCat(
        WorkerName(slot.worker), " left run ", slot.run_id, " at step ",
        slot.next_step, " and no worker took its place within the grace of ",
        absl::FormatDuration(grace_)));
  }
  return earliest;
}

void WorkerSlots::BeginRun(uint64_t run_id) {
  for (Slot& slot : slots_) {
    slot.run_id = run_id;
    slot.next_step = 0;
    slot.next_bucket = 0;
    slot.last_pulled_version = -1;
    slot.collectives_since_step = 0;
  }
}

void WorkerSlots::StartAt(int64_t step) {
  for (Slot& slot : slots_) slot.next_step = step;
}

void WorkerSlots::ContinueRun(uint64_t run_id, int64_t step, absl::Time now) {
  for (Slot& slot : slots_) {
    slot.state = SlotState::STATE_MISSING;
    slot.connected = false;
    slot.run_id = run_id;
    slot.next_step = step;
    slot.next_bucket = 0;
    slot.last_pulled_version = -1;
    slot.collectives_since_step = 0;
    slot.resuming = false;
    slot.missing_since = now;
    slot.queue.clear();
  }
}

void WorkerSlots::FailQueued(const absl::Status& status, Replies* replies) {
  for (Slot& slot : slots_) {
    for (Round& round : slot.queue) {
      replies->emplace_back(std::move(round), status);
    }
    slot.queue.clear();
  }
}

void WorkerSlots::RunFailed(const absl::Status& failed, Replies* replies) {
  FailQueued(failed, replies);
  for (Slot& slot : slots_) {
    if (!slot.connected) {
      slot.state = SlotState::STATE_UNSPECIFIED;
      slot.run_id = 0;
    } else if (slot.state == SlotState::STATE_FINISHED) {
      slot.state = SlotState::STATE_ATTACHED;
    }
    slot.resuming = false;
  }
}

void WorkerSlots::RunFinished() {
  for (Slot& slot : slots_) {
    slot.state = slot.connected ? SlotState::STATE_ATTACHED
                                : SlotState::STATE_UNSPECIFIED;
    slot.run_id = 0;
    slot.next_step = 0;
    slot.resuming = false;
  }
}

int WorkerSlots::connected() const {
  int n = 0;
  for (const Slot& slot : slots_) n += slot.connected ? 1 : 0;
  return n;
}

std::vector<proto::WorkerStatus> WorkerSlots::Status(absl::Time now) const {
  std::vector<proto::WorkerStatus> out;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& slot = slots_[i];
    if (slot.state == SlotState::STATE_UNSPECIFIED) continue;
    proto::WorkerStatus w;
    w.set_index(static_cast<int>(i));
    w.set_name(slot.worker.name);
    w.set_state(slot.state);
    w.set_next_step(slot.next_step);
    w.set_pid(slot.worker.pid);
    if (slot.state == SlotState::STATE_MISSING) {
      w.set_missing_seconds(absl::ToDoubleSeconds(now - slot.missing_since));
      w.set_grace_left_seconds(std::max(
          0.0, absl::ToDoubleSeconds(slot.missing_since + grace_ - now)));
    }
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace node
}  // namespace starling
