#include "server/node/sync_engine.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/tensor_table.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"
#include "server/collective/reduce_kernels.h"
#include "server/shard/optimizer/optimizer_factory.h"

namespace starling {
namespace node {
namespace {

using SlotState = proto::WorkerStatus;

// How often the abort listener looks for peers' failure notices.
constexpr absl::Duration kAbortPollInterval = absl::Milliseconds(20);

absl::Span<std::byte> AsBytes(absl::Span<float> data) {
  return {reinterpret_cast<std::byte*>(data.data()),
          data.size() * sizeof(float)};
}

absl::Span<const std::byte> AsConstBytes(absl::Span<const float> data) {
  return {reinterpret_cast<const std::byte*>(data.data()),
          data.size() * sizeof(float)};
}

// "push", "all_reduce", ... for mismatch messages.
const char* KindName(const proto::WorkerRequest& request) {
  switch (request.kind_case()) {
    case proto::WorkerRequest::kCommitTensors:
      return "end of declarations";
    case proto::WorkerRequest::kPushGradients:
      return "push_gradients";
    case proto::WorkerRequest::kAllReduce:
      return "all_reduce";
    case proto::WorkerRequest::kBarrier:
      return "barrier";
    case proto::WorkerRequest::kFinish:
      return "finish";
    default:
      return "request";
  }
}

double UnixSeconds(absl::Time t) {
  return absl::ToDoubleSeconds(t - absl::UnixEpoch());
}

}  // namespace

SyncEngine::SyncEngine(
    SyncEngineOptions options, collective::Communicator* comm,
    transport::Transport* transport, NodeMetrics* metrics,
    RunRendezvous* rendezvous,
    std::function<void(int64_t, const absl::Status&)> on_step)
    : options_(std::move(options)),
      comm_(comm),
      transport_(transport),
      metrics_(metrics),
      rendezvous_(rendezvous),
      on_step_(std::move(on_step)),
      declared_(transport->rank()) {
  absl::MutexLock lock(&mu_);
  slots_.resize(options_.local_workers);
}

SyncEngine::~SyncEngine() { Stop(); }

void SyncEngine::Start() {
  thread_ = std::thread([this] { Loop(); });
  if (transport_->size() > 1) {
    abort_listener_ = std::thread([this] { AbortListener(); });
  }
}

void SyncEngine::Stop() {
  Deferred deferred;
  bool first = false;  // later calls (the destructor's) only join
  {
    absl::MutexLock lock(&mu_);
    if (!stop_) {
      first = true;
      stop_ = true;
      const absl::Status down = absl::UnavailableError(
          absl::StrCat("daemon ", options_.self, " is shutting down"));
      if (run_ != nullptr) run_->cancel.Cancel(down);
      for (Slot& slot : slots_) {
        for (Round& round : slot.queue) {
          deferred.replies.emplace_back(std::move(round), down);
        }
        slot.queue.clear();
      }
      changed_.SignalAll();
    }
  }
  Flush(deferred);
  if (first) stop_listener_.Notify();
  if (thread_.joinable()) thread_.join();
  if (abort_listener_.joinable()) abort_listener_.join();
}

std::string SyncEngine::WorkerName(const WorkerHandle& worker) const {
  return absl::StrCat("local worker '", worker.name, "' (index ", worker.index,
                      worker.pid != 0 ? absl::StrCat(", pid ", worker.pid) : "",
                      ") of ", options_.self);
}

std::string SyncEngine::Describe(const proto::WorkerRequest& request) const {
  switch (request.kind_case()) {
    case proto::WorkerRequest::kPushGradients:
      return absl::StrCat("step ", request.push_gradients().step(), " on ",
                          options_.self);
    case proto::WorkerRequest::kAllReduce:
      return absl::StrCat("all_reduce of ",
                          request.all_reduce().slice().elements(),
                          " floats on ", options_.self);
    default:
      return absl::StrCat(KindName(request), " on ", options_.self);
  }
}

void SyncEngine::Flush(Deferred& deferred) {
  for (auto& [round, status] : deferred.replies) {
    round.worker.responder->Reply(round.request.id(),
                                  Annotate(status, Describe(round.request)));
  }
  deferred.replies.clear();
  for (const proto::RunStatus& ended : deferred.ended) {
    if (rendezvous_ != nullptr) rendezvous_->EndRun(ended);
  }
  deferred.ended.clear();
  if (deferred.broadcast) {
    deferred.broadcast = false;
    const std::string bytes = deferred.abort.SerializeAsString();
    const absl::Span<const std::byte> message(
        reinterpret_cast<const std::byte*>(bytes.data()), bytes.size());
    for (int peer = 0; peer < transport_->size(); ++peer) {
      if (peer == transport_->rank() || !transport_->PeerStatus(peer).ok()) {
        continue;
      }
      // Best effort: the coordinator fans the failure out too.
      transport_->SendControl(peer, kRunAbortTag, message).IgnoreError();
    }
  }
}

// --- Slots ------------------------------------------------------------------

absl::Status SyncEngine::Attach(const WorkerHandle& worker,
                                proto::HelloReply* reply) {
  if (worker.index < 0 || worker.index >= options_.local_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker index ", worker.index, " is outside 0..",
                     options_.local_workers - 1, " (", options_.self,
                     " runs --local_workers=", options_.local_workers, ")"));
  }
  absl::MutexLock lock(&mu_);
  if (stop_) {
    return absl::UnavailableError(
        absl::StrCat("daemon ", options_.self, " is shutting down"));
  }
  Slot& slot = slots_[worker.index];
  reply->set_grace_ms(absl::ToInt64Milliseconds(options_.grace));
  switch (slot.state) {
    case SlotState::STATE_ATTACHED:
      return absl::AlreadyExistsError(absl::StrCat(
          "worker index ", worker.index, " on ", options_.self,
          " is taken by '", slot.worker.name, "'",
          slot.worker.pid != 0 ? absl::StrCat(" (pid ", slot.worker.pid, ")")
                               : ""));
    case SlotState::STATE_FINISHED:
      if (slot.connected) {
        return absl::AlreadyExistsError(
            absl::StrCat("worker index ", worker.index, " on ", options_.self,
                         " is taken by '", slot.worker.name,
                         "', which is finishing run ", slot.run_id));
      }
      return absl::FailedPreconditionError(absl::StrCat(
          "worker index ", worker.index, " on ", options_.self,
          " already finished run ", slot.run_id,
          ", which is still running (other workers have not finished); "
          "attach again once it ends"));
    case SlotState::STATE_MISSING: {
      // Resume in place of the worker that left.
      const absl::Duration gone = absl::Now() - slot.missing_since;
      slot.state = SlotState::STATE_ATTACHED;
      slot.connected = true;
      slot.worker = worker;
      slot.resuming = true;
      slot.resumed_declarations = 0;
      reply->set_run_id(slot.run_id);
      reply->set_next_step(slot.next_step);
      STARLING_LOG(INFO) << WorkerName(worker) << " resumes run " << slot.run_id
                         << " at step " << slot.next_step << " after "
                         << absl::FormatDuration(
                                absl::Trunc(gone, absl::Milliseconds(1)))
                         << " without a worker";
      changed_.SignalAll();
      return absl::OkStatus();
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
  declared_.Forget(worker.index);
  reply->set_run_id(0);
  reply->set_next_step(0);
  return absl::OkStatus();
}

void SyncEngine::Detach(const WorkerHandle& worker) {
  Deferred deferred;
  {
    absl::MutexLock lock(&mu_);
    if (worker.index < 0 || worker.index >= options_.local_workers) return;
    Slot& slot = slots_[worker.index];
    if (slot.worker.session != worker.session) return;  // replaced already
    slot.connected = false;
    const bool in_running_run =
        run_ != nullptr && slot.run_id == run_->id && slot.run_id != 0;
    if (slot.state == SlotState::STATE_FINISHED) {
      // Its finish round stays queued: the worker is done with the run.
    } else if (in_running_run) {
      // Its unconsumed requests go: a replacement sends them again.
      slot.queue.clear();
      slot.state = SlotState::STATE_MISSING;
      slot.missing_since = absl::Now();
      slot.resuming = false;
      STARLING_LOG(WARNING)
          << WorkerName(worker) << " left run " << slot.run_id << " at step "
          << slot.next_step << " without finishing; holding the run for "
          << absl::FormatDuration(options_.grace)
          << " for a worker with the same index";
    } else {
      // Before its run began (or after it ended): as if it never came.
      slot.queue.clear();
      slot.state = SlotState::STATE_UNSPECIFIED;
      slot.run_id = 0;
      declared_.Forget(worker.index);
    }
    changed_.SignalAll();
  }
  Flush(deferred);
}

absl::Status SyncEngine::StaleRunErrorLocked(uint64_t run_id) const {
  for (auto it = history_.rbegin(); it != history_.rend(); ++it) {
    if (it->run_id() != run_id) continue;
    if (it->state() == proto::RunStatus::STATE_FAILED) {
      return absl::AbortedError(absl::StrCat("run ", run_id, " failed at step ",
                                             it->steps(), ": ", it->error()));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("run ", run_id, " finished after ", it->steps(),
                     " steps; declare tensors to start the next run"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("run ", run_id, " is over"));
}

void SyncEngine::Declare(const WorkerHandle& worker,
                         const proto::WorkerRequest& request) {
  const proto::TensorSpec& spec = request.declare_tensor().spec();
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    Slot& slot = slots_[worker.index];
    if (slot.worker.session != worker.session) {
      status = absl::FailedPreconditionError("this worker was replaced");
    } else if (slot.resuming && run_ != nullptr && slot.run_id == run_->id) {
      // A replacement declares the run's tensors again, in order.
      const std::vector<TensorLayout::Entry>& tensors = run_->layout.tensors;
      const size_t k = slot.resumed_declarations;
      if (k >= tensors.size()) {
        status = absl::InvalidArgumentError(absl::StrCat(
            "tensor '", spec.name(), "' is one more than the ", tensors.size(),
            " tensors of run ", run_->id, ", which this worker resumes"));
      } else if (!proto::SameSpec(tensors[k].spec, spec)) {
        status = absl::InvalidArgumentError(absl::StrCat(
            "tensor '", spec.name(), "' ", proto::DescribeSpec(spec),
            " is not tensor ", k, " of run ", run_->id, " ('",
            tensors[k].spec.name(), "' ", proto::DescribeSpec(tensors[k].spec),
            "); a worker resuming a run declares the run's tensors in order"));
      } else {
        ++slot.resumed_declarations;
      }
    } else if (run_ != nullptr && slot.run_id == run_->id) {
      status = absl::FailedPreconditionError(absl::StrCat(
          "tensor '", spec.name(), "' declared after run ", run_->id,
          " began (its declarations ended with the first push, pull, "
          "all-reduce or barrier) on ",
          options_.self));
    } else {
      // Declaring for the next run (a slot of an ended run starts anew).
      slot.run_id = 0;
      slot.next_step = 0;
      status = declared_.Declare(worker.index, spec);
    }
  }
  worker.responder->Reply(request.id(), status);
}

// --- Rounds -----------------------------------------------------------------

void SyncEngine::Submit(const WorkerHandle& worker,
                        const proto::WorkerRequest& request) {
  absl::Status refuse;
  proto::WorkerResponse answer;
  int pass_fd = -1;  // the parameters' memfd, with a resuming commit's reply
  {
    absl::MutexLock lock(&mu_);
    Slot& slot = slots_[worker.index];
    const bool commit =
        request.kind_case() == proto::WorkerRequest::kCommitTensors;
    if (stop_) {
      refuse = absl::UnavailableError(
          absl::StrCat("daemon ", options_.self, " is shutting down"));
    } else if (slot.worker.session != worker.session) {
      refuse = absl::FailedPreconditionError("this worker was replaced");
    } else if (commit && slot.resuming && run_ != nullptr &&
               slot.run_id == run_->id) {
      // A replacement's end of declarations: answered here, not a round.
      if (slot.resumed_declarations != run_->layout.tensors.size()) {
        refuse = absl::InvalidArgumentError(absl::StrCat(
            "declarations ended after ", slot.resumed_declarations, " of the ",
            run_->layout.tensors.size(), " tensors of run ", run_->id,
            ", which this worker resumes"));
      } else {
        slot.resuming = false;
        answer.mutable_commit()->set_total_workers(run_->total_workers);
        answer.mutable_commit()->set_run_id(run_->id);
        answer.mutable_commit()->set_next_step(slot.next_step);
        if (options_.pushes_are_rounds) {
          pass_fd = ::dup(run_->store->parameters_fd());
        }
      }
    } else if (slot.run_id != 0 &&
               (run_ == nullptr || slot.run_id != run_->id)) {
      refuse = StaleRunErrorLocked(slot.run_id);
    } else if (commit && slot.run_id != 0) {
      refuse = absl::FailedPreconditionError(
          absl::StrCat("declarations of run ", slot.run_id, " ended already"));
    } else if (!commit && slot.run_id == 0) {
      refuse = absl::FailedPreconditionError(
          "tensors not committed (the client ends the declarations first)");
    } else {
      if (request.kind_case() == proto::WorkerRequest::kFinish) {
        slot.state = SlotState::STATE_FINISHED;
      }
      slot.queue.push_back(Round{worker, request, absl::Now()});
      changed_.SignalAll();
      return;
    }
  }
  worker.responder->Reply(request.id(), Annotate(refuse, Describe(request)),
                          std::move(answer), pass_fd);
}

bool SyncEngine::RoundReadyLocked() const {
  for (const Slot& slot : slots_) {
    if (slot.queue.empty()) return false;
  }
  return true;
}

absl::Time SyncEngine::CheckGraceLocked(Deferred* deferred) {
  absl::Time earliest = absl::InfiniteFuture();
  if (run_ == nullptr) return earliest;
  const absl::Time now = absl::Now();
  for (const Slot& slot : slots_) {
    if (slot.state != SlotState::STATE_MISSING) continue;
    const absl::Time expiry = slot.missing_since + options_.grace;
    if (now < expiry) {
      earliest = std::min(earliest, expiry);
      continue;
    }
    FailRunLocked(run_->id,
                  absl::UnavailableError(absl::StrCat(
                      WorkerName(slot.worker), " left run ", slot.run_id,
                      " at step ", slot.next_step,
                      " and no worker took its place within the grace of ",
                      absl::FormatDuration(options_.grace))),
                  /*broadcast=*/true, deferred);
    return absl::InfiniteFuture();
  }
  return earliest;
}

int64_t SyncEngine::StepsLocked(Run& run) const {
  if (options_.pushes_are_rounds) return applied_version_;
  absl::MutexLock ps_lock(&run.ps_mu);
  return run.ps_updates;
}

void SyncEngine::RecordEndLocked(const proto::RunStatus& status,
                                 Deferred* deferred) {
  history_.push_back(status);
  while (static_cast<int>(history_.size()) > std::max(1, options_.history)) {
    history_.pop_front();
  }
  deferred->ended.push_back(status);
}

void SyncEngine::FailRunLocked(uint64_t run_id, const absl::Status& why,
                               bool broadcast, Deferred* deferred) {
  if (run_ == nullptr || run_->id != run_id) return;
  STARLING_LOG(ERROR) << "run " << run_id << " failed on " << options_.self
                      << ": " << why;
  metrics_->step_failures->Increment();
  run_->cancel.Cancel(why);
  proto::RunStatus status;
  status.set_run_id(run_id);
  status.set_state(proto::RunStatus::STATE_FAILED);
  status.set_steps(StepsLocked(*run_));
  status.set_error(std::string(why.message()));
  status.set_parameter_count(run_->layout.total_elements);
  status.set_total_workers(run_->total_workers);
  status.set_started_unix_seconds(UnixSeconds(run_->started));
  status.set_ended_unix_seconds(UnixSeconds(absl::Now()));
  RecordEndLocked(status, deferred);
  const absl::Status failed =
      absl::AbortedError(absl::StrCat("run ", run_id, " failed at step ",
                                      applied_version_, ": ", why.message()));
  for (Slot& slot : slots_) {
    for (Round& round : slot.queue) {
      deferred->replies.emplace_back(std::move(round), failed);
    }
    slot.queue.clear();
    if (!slot.connected) {
      slot.state = SlotState::STATE_UNSPECIFIED;
      slot.run_id = 0;
    } else if (slot.state == SlotState::STATE_FINISHED) {
      slot.state = SlotState::STATE_ATTACHED;
    }
    slot.resuming = false;
  }
  if (broadcast) {
    deferred->broadcast = true;
    deferred->abort.set_run_id(run_id);
    deferred->abort.set_rank(transport_->rank());
    deferred->abort.set_code(static_cast<int>(why.code()));
    deferred->abort.set_error(std::string(why.message()));
  }
  // The memory goes once the step thread and pulls let go.
  run_.reset();
  updating_ = false;
  changed_.SignalAll();
}

void SyncEngine::AbortRun(uint64_t run_id, const absl::Status& why) {
  Deferred deferred;
  {
    absl::MutexLock lock(&mu_);
    if (run_ == nullptr) return;
    FailRunLocked(run_id == 0 ? run_->id : run_id, why, /*broadcast=*/false,
                  &deferred);
  }
  Flush(deferred);
}

void SyncEngine::AbortListener() {
  // Polls every peer's abort tag without blocking; a notice fails the run
  // here too, naming the rank where it failed and why.
  while (!stop_listener_.WaitForNotificationWithTimeout(kAbortPollInterval)) {
    for (int peer = 0; peer < transport_->size(); ++peer) {
      if (peer == transport_->rank()) continue;
      absl::StatusOr<std::vector<std::byte>> got =
          transport_->RecvControl(peer, kRunAbortTag, absl::Now());
      if (!got.ok()) continue;
      proto::RunAbort abort;
      if (!abort.ParseFromArray(got->data(), static_cast<int>(got->size()))) {
        STARLING_LOG(WARNING) << "unparsable run failure notice from "
                              << transport_->PeerName(peer);
        continue;
      }
      AbortRun(abort.run_id(),
               absl::Status(absl::StatusCode::kAborted,
                            absl::StrCat(transport_->PeerName(peer),
                                         " failed the run: ", abort.error())));
    }
  }
}

void SyncEngine::Loop() {
  while (true) {
    std::vector<Round> rounds;
    std::shared_ptr<Run> run;
    Deferred deferred;
    {
      absl::MutexLock lock(&mu_);
      while (!stop_) {
        const absl::Time wake = CheckGraceLocked(&deferred);
        if (RoundReadyLocked()) break;
        if (!deferred.replies.empty() || !deferred.ended.empty() ||
            deferred.broadcast) {
          break;  // send what the grace check produced first
        }
        changed_.WaitWithDeadline(&mu_, wake);
      }
      if (stop_) return;
      if (RoundReadyLocked()) {
        for (Slot& slot : slots_) {
          rounds.push_back(std::move(slot.queue.front()));
          slot.queue.pop_front();
          if (rounds.back().request.kind_case() ==
              proto::WorkerRequest::kPushGradients) {
            ++slot.next_step;
          }
        }
        run = run_;
      }
    }
    Flush(deferred);
    if (rounds.empty()) continue;
    proto::WorkerResponse reply;
    absl::Status status = Execute(rounds, run, &reply);
    const bool is_step =
        rounds[0].request.kind_case() == proto::WorkerRequest::kPushGradients;
    if (!status.ok() && run != nullptr) {
      absl::MutexLock lock(&mu_);
      FailRunLocked(run->id, status, /*broadcast=*/true, &deferred);
    } else if (!status.ok()) {
      STARLING_LOG(WARNING) << status;
    }
    Flush(deferred);
    // Sync modes: a committed worker gets the parameters' memfd, to map
    // them read-only (client ParametersView; parameter-server mode writes
    // them at any time, so no views there).
    const bool pass_parameters =
        status.ok() && options_.pushes_are_rounds &&
        rounds[0].request.kind_case() == proto::WorkerRequest::kCommitTensors;
    const std::shared_ptr<Run> committed =
        pass_parameters ? current_run() : nullptr;
    for (Round& round : rounds) {
      round.worker.responder->Reply(
          round.request.id(), status, reply,
          committed != nullptr ? ::dup(committed->store->parameters_fd()) : -1);
      if (is_step) {
        metrics_->pushes->Increment();
        metrics_->push_seconds->Observe(
            absl::ToDoubleSeconds(absl::Now() - round.submitted));
      }
    }
    if (is_step && on_step_ != nullptr) {
      on_step_(rounds[0].request.push_gradients().step(), status);
    }
  }
}

absl::Status SyncEngine::CheckSame(const std::vector<Round>& rounds) const {
  const proto::WorkerRequest& first = rounds[0].request;
  for (size_t i = 1; i < rounds.size(); ++i) {
    const proto::WorkerRequest& other = rounds[i].request;
    bool same = first.kind_case() == other.kind_case();
    if (same && first.has_push_gradients()) {
      same = first.push_gradients().step() == other.push_gradients().step();
    }
    if (same && first.has_all_reduce()) {
      same = first.all_reduce().slice().elements() ==
             other.all_reduce().slice().elements();
    }
    if (!same) {
      return absl::InvalidArgumentError(absl::StrCat(
          "local workers of ", options_.self,
          " made different collective calls: ", rounds[0].worker.name, " ",
          Describe(first), ", ", rounds[i].worker.name, " ", Describe(other)));
    }
  }
  return absl::OkStatus();
}

collective::CallOptions SyncEngine::Call(Run& run) const {
  collective::CallOptions call;
  // A peer may hold the step for its missing worker up to the grace.
  call.timeout = options_.timeout + options_.grace;
  call.cancel = &run.cancel;
  return call;
}

absl::Status SyncEngine::Execute(std::vector<Round>& rounds,
                                 const std::shared_ptr<Run>& run,
                                 proto::WorkerResponse* reply) {
  const proto::WorkerRequest::KindCase kind = rounds[0].request.kind_case();
  if (kind != proto::WorkerRequest::kCommitTensors) {
    if (run == nullptr) {
      absl::MutexLock lock(&mu_);
      return StaleRunErrorLocked(rounds[0].worker.index >= 0
                                     ? slots_[rounds[0].worker.index].run_id
                                     : 0);
    }
    if (run->cancel.cancelled()) return run->cancel.status();
  }
  absl::Status status = CheckSame(rounds);
  if (status.ok()) {
    switch (kind) {
      case proto::WorkerRequest::kCommitTensors:
        status = Commit(rounds, reply);
        break;
      case proto::WorkerRequest::kPushGradients:
        status = Step(rounds, *run);
        break;
      case proto::WorkerRequest::kAllReduce:
        status = AllReduce(rounds, *run);
        break;
      case proto::WorkerRequest::kBarrier:
        status = Annotate(comm_->Barrier(Call(*run)),
                          absl::StrCat("barrier on ", options_.self));
        break;
      case proto::WorkerRequest::kFinish:
        status = Finish(*run);
        break;
      default:
        status = absl::InternalError("not a round");
    }
  }
  if (!status.ok() && kind != proto::WorkerRequest::kCommitTensors) {
    // A peer that died makes others time out on the survivors it was
    // talking to; name every peer this transport has lost, so that the
    // error names the dead rank too.
    std::string lost;
    for (int peer = 0; peer < transport_->size(); ++peer) {
      if (peer == transport_->rank()) continue;
      const absl::Status peer_status = transport_->PeerStatus(peer);
      if (!peer_status.ok() &&
          !absl::StrContains(status.message(), transport_->PeerName(peer))) {
        absl::StrAppend(&lost, lost.empty() ? "" : "; ",
                        transport_->PeerName(peer), ": ",
                        peer_status.message());
      }
    }
    if (!lost.empty()) {
      status = absl::Status(
          status.code(),
          absl::StrCat(status.message(), " [peers lost: ", lost, "]"));
    }
  }
  return status;
}

absl::Status SyncEngine::Commit(std::vector<Round>& rounds,
                                proto::WorkerResponse* reply) {
  std::vector<int> workers;
  for (const Round& round : rounds) workers.push_back(round.worker.index);
  absl::StatusOr<std::vector<proto::TensorSpec>> local =
      declared_.LocalTable(workers);
  std::vector<proto::TensorSpec> tensors;
  std::string local_error;
  if (local.ok()) {
    tensors = *local;
  } else {
    local_error = std::string(local.status().message());
  }
  for (int w : workers) declared_.Forget(w);
  if (rendezvous_ == nullptr) {
    return absl::FailedPreconditionError("no group to begin a run with");
  }
  absl::StatusOr<RunRendezvous::Begun> begun = rendezvous_->BeginRun(
      tensors, local_error, options_.local_workers, comm_->next_op_seq(),
      absl::Now() + options_.timeout);
  if (!begun.ok()) {
    return Annotate(begun.status(),
                    absl::StrCat("ending the declarations on ", options_.self));
  }
  auto run = std::make_shared<Run>();
  run->id = begun->run_id;
  run->layout = TensorLayout::FromSpecs(tensors);
  run->total_workers = begun->total_workers;
  run->started = absl::Now();
  for (const TensorLayout::Entry& entry : run->layout.tensors) {
    if (entry.spec.dtype() != proto::DATA_TYPE_FLOAT32) {
      return absl::UnimplementedError(
          absl::StrCat("tensor '", entry.spec.name(), "' is ",
                       proto::DescribeSpec(entry.spec),
                       ": this version moves float32 tensors only"));
    }
  }
  shard::ShardStoreOptions store_options;
  store_options.total_elements = run->layout.total_elements;
  store_options.ranks = transport_->size();
  store_options.rank = transport_->rank();
  STARLING_ASSIGN_OR_RETURN(run->store,
                            shard::ShardStore::Create(store_options));
  shard::OptimizerOptions optimizer_options;
  optimizer_options.name = options_.optimizer;
  optimizer_options.learning_rate = options_.learning_rate;
  if (optimizer_options.name == "none") {
    optimizer_options.name = "sgd";
    optimizer_options.learning_rate = 0.0f;
  }
  STARLING_ASSIGN_OR_RETURN(
      run->optimizer,
      shard::CreateOptimizer(optimizer_options, run->store->shard_elements()));
  STARLING_RETURN_IF_ERROR(run->optimizer->SetGradientScale(
      1.0f / static_cast<float>(std::max(1, run->total_workers))));
  comm_->SkipTo(begun->first_op_seq);
  metrics_->shard_bytes->Set(static_cast<double>(run->store->ShardBytes()));
  metrics_->optimizer_state_bytes->Set(
      static_cast<double>(run->optimizer->StateBytes()));
  reply->mutable_commit()->set_total_workers(run->total_workers);
  reply->mutable_commit()->set_run_id(run->id);
  reply->mutable_commit()->set_next_step(0);
  STARLING_LOG(INFO) << "run " << run->id << " began on " << options_.self
                     << ": " << run->layout.tensors.size() << " tensors, "
                     << run->layout.total_elements << " parameters, "
                     << run->total_workers << " workers";
  absl::MutexLock lock(&mu_);
  for (Slot& slot : slots_) {
    slot.run_id = run->id;
    slot.next_step = 0;
  }
  applied_version_ = 0;
  updating_ = false;
  run_ = std::move(run);
  changed_.SignalAll();
  return absl::OkStatus();
}

absl::Status SyncEngine::Step(std::vector<Round>& rounds, Run& run) {
  const int64_t step = rounds[0].request.push_gradients().step();
  const std::string where = absl::StrCat("step ", step, " on ", options_.self);
  {
    absl::MutexLock lock(&mu_);
    if (step != applied_version_) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": pushed for step ", step,
                       " but the next step is ", applied_version_));
    }
    // Block new pulls and wait for the current readers to leave.
    updating_ = true;
    mu_.Await(absl::Condition(
        +[](int* readers) { return *readers == 0; }, &readers_));
  }
  const absl::Time start = absl::Now();
  shard::ShardStore& store = *run.store;
  // Views of version `step` (held by workers that all pushed now) end.
  store.MarkWriting(step + 1);
  absl::Status status = [&]() -> absl::Status {
    STARLING_RETURN_IF_ERROR(LocalReduce(rounds, run));
    absl::Span<float> grads = store.gradients();
    const collective::CallOptions call = Call(run);
    const absl::Time comm_start = absl::Now();
    STARLING_RETURN_IF_ERROR(Annotate(
        comm_->ReduceScatter(AsBytes(grads), collective::DataType::kFloat32,
                             collective::ReduceOp::kSum, call),
        "reduce-scatter"));
    absl::Duration comm = absl::Now() - comm_start;
    STARLING_RETURN_IF_ERROR(
        Annotate(run.optimizer->Apply(store.shard_parameters(),
                                      store.shard_gradients(), step + 1),
                 "optimizer"));
    const absl::Time gather_start = absl::Now();
    STARLING_RETURN_IF_ERROR(
        Annotate(comm_->AllGather(AsBytes(store.parameters()),
                                  collective::DataType::kFloat32, call),
                 "all-gather"));
    comm += absl::Now() - gather_start;
    metrics_->allreduce_seconds->Observe(absl::ToDoubleSeconds(comm));
    metrics_->collective_bytes->Increment(2.0 * grads.size() * sizeof(float));
    return absl::OkStatus();
  }();
  absl::MutexLock lock(&mu_);
  updating_ = false;
  if (!status.ok()) return Annotate(status, where);
  if (run_.get() != &run) {
    return absl::AbortedError(absl::StrCat(where, ": the run ended"));
  }
  store.MarkVersion(step + 1);
  applied_version_ = step + 1;
  metrics_->steps->Increment();
  metrics_->step_seconds->Observe(absl::ToDoubleSeconds(absl::Now() - start));
  return absl::OkStatus();
}

absl::Status SyncEngine::LocalReduce(const std::vector<Round>& rounds,
                                     Run& run) {
  // Each tensor's range of the gradient buffer is written once, in one pass
  // over memory: the sum of the buffers pushed for it, read in place from
  // the workers' pools in worker-index order (the first copied, the others
  // added, as the reduce kernels do), or zeros where no worker pushed it.
  // Starting from the first buffer rather than from a zeroed accumulator
  // changes one thing only: an element that is -0.0 in every pushed buffer
  // now sums to -0.0 (IEEE), where 0.0 + -0.0 made it +0.0.
  const TensorLayout& layout = run.layout;
  absl::Span<float> grads = run.store->gradients();
  std::vector<std::vector<absl::Span<const std::byte>>> inputs(
      layout.tensors.size());
  for (const Round& round : rounds) {
    for (const proto::PoolSlice& slice :
         round.request.push_gradients().slices()) {
      STARLING_ASSIGN_OR_RETURN(const TensorLayout::Entry* entry,
                                layout.Find(slice.tensor()));
      if (slice.elements() != entry->elements) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", slice.tensor(), "' from ",
                         round.worker.name, ": ", slice.elements(),
                         " elements pushed, ", entry->elements, " declared"));
      }
      STARLING_ASSIGN_OR_RETURN(absl::Span<float> src,
                                round.worker.pool->Floats(slice));
      inputs[entry - layout.tensors.data()].push_back(AsConstBytes(src));
    }
  }
  double bytes = 0;
  for (size_t t = 0; t < layout.tensors.size(); ++t) {
    const TensorLayout::Entry& entry = layout.tensors[t];
    absl::Span<float> dst = grads.subspan(entry.offset, entry.elements);
    if (inputs[t].empty()) {
      std::fill(dst.begin(), dst.end(), 0.0f);
      bytes += static_cast<double>(dst.size()) * sizeof(float);
      continue;
    }
    STARLING_RETURN_IF_ERROR(collective::ReduceMany(
        collective::DataType::kFloat32, collective::ReduceOp::kSum,
        AsBytes(dst), inputs[t]));
    // Each input read once, the sum written once.
    bytes += (inputs[t].size() + 1.0) * dst.size() * sizeof(float);
  }
  metrics_->local_reduce_copied_bytes->Increment(bytes);
  return absl::OkStatus();
}

absl::Status SyncEngine::AllReduce(std::vector<Round>& rounds, Run& run) {
  const std::string where = Describe(rounds[0].request);
  const size_t elements = rounds[0].request.all_reduce().slice().elements();
  // The workers' buffers are summed (one pass) into scratch_, which the
  // collective sends and reduces in place, and the result is copied back
  // into each buffer; a failed collective leaves the workers' buffers as
  // they were.
  scratch_.resize(elements);
  std::vector<absl::Span<const std::byte>> inputs;
  std::vector<absl::Span<float>> buffers;
  for (Round& round : rounds) {
    absl::StatusOr<absl::Span<float>> src =
        round.worker.pool->Floats(round.request.all_reduce().slice());
    if (!src.ok()) return Annotate(src.status(), where);
    inputs.push_back(AsConstBytes(*src));
    buffers.push_back(*src);
  }
  absl::Span<std::byte> sum = AsBytes(absl::MakeSpan(scratch_));
  STARLING_RETURN_IF_ERROR(
      Annotate(collective::ReduceMany(collective::DataType::kFloat32,
                                      collective::ReduceOp::kSum, sum, inputs),
               where));
  metrics_->allreduce_staging_copied_bytes->Increment((inputs.size() + 1.0) *
                                                      sum.size());
  const absl::Time start = absl::Now();
  STARLING_RETURN_IF_ERROR(
      Annotate(comm_->AllReduce(sum, collective::DataType::kFloat32,
                                collective::ReduceOp::kSum, Call(run)),
               where));
  metrics_->allreduce_seconds->Observe(
      absl::ToDoubleSeconds(absl::Now() - start));
  metrics_->collective_bytes->Increment(elements * sizeof(float));
  for (absl::Span<float> dst : buffers) {
    std::memcpy(dst.data(), scratch_.data(), sum.size());
  }
  metrics_->allreduce_staging_copied_bytes->Increment(2.0 * buffers.size() *
                                                      sum.size());
  return absl::OkStatus();
}

absl::Status SyncEngine::Finish(Run& run) {
  // Every worker of every daemon finished once every daemon passes this.
  STARLING_RETURN_IF_ERROR(
      Annotate(comm_->Barrier(Call(run)),
               absl::StrCat("finishing run ", run.id, " on ", options_.self)));
  Deferred deferred;
  {
    absl::MutexLock lock(&mu_);
    if (run_.get() != &run) {
      return absl::AbortedError(absl::StrCat("run ", run.id, " ended"));
    }
    proto::RunStatus status;
    status.set_run_id(run.id);
    status.set_state(proto::RunStatus::STATE_FINISHED);
    status.set_steps(StepsLocked(run));
    status.set_parameter_count(run.layout.total_elements);
    status.set_total_workers(run.total_workers);
    status.set_started_unix_seconds(UnixSeconds(run.started));
    status.set_ended_unix_seconds(UnixSeconds(absl::Now()));
    RecordEndLocked(status, &deferred);
    for (Slot& slot : slots_) {
      slot.state = slot.connected ? SlotState::STATE_ATTACHED
                                  : SlotState::STATE_UNSPECIFIED;
      slot.run_id = 0;
      slot.next_step = 0;
      slot.resuming = false;
    }
    STARLING_LOG(INFO) << "run " << run.id << " finished on " << options_.self
                       << " after " << applied_version_ << " steps";
    run_.reset();  // the memory goes with the last reference
    changed_.SignalAll();
  }
  Flush(deferred);
  return absl::OkStatus();
}

// --- Pulls and status -------------------------------------------------------

absl::StatusOr<std::shared_ptr<Run>> SyncEngine::RunOf(
    const WorkerHandle& worker) const {
  absl::MutexLock lock(&mu_);
  const Slot& slot = slots_[worker.index];
  if (slot.worker.session != worker.session) {
    return absl::FailedPreconditionError("this worker was replaced");
  }
  if (slot.run_id == 0) {
    return absl::FailedPreconditionError(
        "tensors not committed (the client ends the declarations first)");
  }
  if (run_ == nullptr || run_->id != slot.run_id) {
    return StaleRunErrorLocked(slot.run_id);
  }
  return run_;
}

void SyncEngine::Pull(const WorkerHandle& worker,
                      const proto::WorkerRequest& request) {
  const int64_t version = request.pull_parameters().version();
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + options_.timeout + options_.grace;
  std::shared_ptr<Run> run;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    const Slot& slot = slots_[worker.index];
    const uint64_t run_id = slot.run_id;
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || run_ == nullptr || run_->id != run_id ||
             (applied_version_ >= version && !updating_);
    };
    if (slot.worker.session != worker.session) {
      status = absl::FailedPreconditionError("this worker was replaced");
    } else if (run_id == 0) {
      status = absl::FailedPreconditionError(
          "tensors not committed (the client ends the declarations first)");
    } else {
      mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
      if (stop_) {
        status = absl::UnavailableError(
            absl::StrCat("daemon ", options_.self, " is shutting down"));
      } else if (run_ == nullptr || run_->id != run_id) {
        status = StaleRunErrorLocked(run_id);
      } else if (applied_version_ < version || updating_) {
        status = absl::DeadlineExceededError(absl::StrCat(
            "parameters of version ", version, " not ready within ",
            absl::FormatDuration(options_.timeout + options_.grace), " on ",
            options_.self, " (version ", applied_version_,
            " applied; every worker of the job must push each step)"));
      } else {
        run = run_;
        ++readers_;
      }
    }
  }
  if (status.ok()) {
    const absl::Span<const float> params = run->store->parameters();
    for (const proto::PoolSlice& slice : request.pull_parameters().slices()) {
      absl::StatusOr<const TensorLayout::Entry*> entry =
          run->layout.Find(slice.tensor());
      if (!entry.ok()) {
        status = entry.status();
        break;
      }
      if (slice.elements() != (*entry)->elements) {
        status = absl::InvalidArgumentError(
            absl::StrCat("tensor '", slice.tensor(), "': ", slice.elements(),
                         " elements asked, ", (*entry)->elements, " declared"));
        break;
      }
      absl::StatusOr<absl::Span<float>> dst = worker.pool->Floats(slice);
      if (!dst.ok()) {
        status = dst.status();
        break;
      }
      std::memcpy(dst->data(), params.data() + (*entry)->offset,
                  dst->size() * sizeof(float));
      metrics_->pull_copied_bytes->Increment(2.0 * dst->size() * sizeof(float));
    }
    absl::MutexLock lock(&mu_);
    --readers_;
  }
  metrics_->pulls->Increment();
  metrics_->pull_seconds->Observe(absl::ToDoubleSeconds(absl::Now() - start));
  if (!status.ok()) {
    status = Annotate(status, absl::StrCat("pull of version ", version, " on ",
                                           options_.self));
  }
  worker.responder->Reply(request.id(), status);
}

std::shared_ptr<Run> SyncEngine::current_run() const {
  absl::MutexLock lock(&mu_);
  return run_;
}

int SyncEngine::attached_workers() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const Slot& slot : slots_) n += slot.connected ? 1 : 0;
  return n;
}

proto::RunStatus SyncEngine::run_status() const {
  absl::MutexLock lock(&mu_);
  proto::RunStatus status;
  if (run_ != nullptr) {
    status.set_run_id(run_->id);
    status.set_state(proto::RunStatus::STATE_RUNNING);
    status.set_parameter_count(run_->layout.total_elements);
    status.set_total_workers(run_->total_workers);
    status.set_started_unix_seconds(UnixSeconds(run_->started));
    if (options_.pushes_are_rounds) {
      status.set_steps(applied_version_);
    } else {
      absl::MutexLock ps_lock(&run_->ps_mu);
      status.set_steps(run_->ps_updates);
    }
    return status;
  }
  for (const Slot& slot : slots_) {
    if (slot.connected) {
      status.set_state(proto::RunStatus::STATE_DECLARING);
      return status;
    }
  }
  if (!history_.empty()) return history_.back();
  return status;
}

std::vector<proto::RunStatus> SyncEngine::recent_runs() const {
  absl::MutexLock lock(&mu_);
  return std::vector<proto::RunStatus>(history_.rbegin(), history_.rend());
}

std::vector<proto::WorkerStatus> SyncEngine::workers() const {
  absl::MutexLock lock(&mu_);
  std::vector<proto::WorkerStatus> out;
  const absl::Time now = absl::Now();
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
          0.0,
          absl::ToDoubleSeconds(slot.missing_since + options_.grace - now)));
    }
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace node
}  // namespace starling
