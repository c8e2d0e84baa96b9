#include "server/node/run/run_manager.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"
#include "server/base/tensor_table.h"

namespace starling {
namespace node {

RunManager::RunManager(
    RunManagerOptions options, collective::Communicator* comm,
    transport::Transport* transport, NodeMetrics* metrics,
    RunRendezvous* rendezvous,
    std::function<void(int64_t, const absl::Status&)> on_step)
    : options_(std::move(options)),
      comm_(comm),
      transport_(transport),
      metrics_(metrics),
      rendezvous_(rendezvous),
      on_step_(std::move(on_step)),
      declared_(transport->rank()),
      shared_(comm, metrics),
      notices_(transport,
               [this](uint64_t run_id, const absl::Status& why) {
                 AbortRun(run_id, why);
               }),
      slots_(options_.local_workers, options_.grace, options_.self),
      history_(options_.history) {}

RunManager::~RunManager() { Stop(); }

void RunManager::Start(RunEngine* engine) {
  engine_ = engine;
  thread_ = std::thread([this] { Loop(); });
  notices_.Start();
}

void RunManager::Stop(const absl::Status& why) {
  Deferred deferred;
  {
    absl::MutexLock lock(&mu_);
    if (!stop_) {
      stop_ = true;
      const absl::Status down = why.ok() ? ShuttingDown() : why;
      // The run ends here (a step in flight is cancelled); one that may go
      // on in a re-formed group is handed over (on_suspended_) once the
      // step thread let go of it (joined below).
      if (run_ != nullptr) {
        FailRunLocked(run_->id, down, /*broadcast=*/false, &deferred);
      }
      slots_.FailQueued(down, &deferred.replies);
      changed_.SignalAll();
    }
  }
  Flush(deferred);
  // Later calls (the destructor's) only join.
  notices_.Stop();
  if (thread_.joinable()) thread_.join();
}

std::string RunManager::Describe(const proto::WorkerRequest& request) const {
  return DescribeRequest(request, options_.self);
}

absl::Status RunManager::ShuttingDown() const {
  return absl::UnavailableError(
      absl::StrCat("daemon ", options_.self, " is shutting down"));
}

void RunManager::Flush(Deferred& deferred) {
  // A suspended run is handed over before its workers hear of the failure:
  // a worker that rejoins at once then waits for the group that carries it
  // instead of attaching to a plane whose run has ended.
  if (deferred.suspended != nullptr) {
    if (on_suspended_ != nullptr) {
      on_suspended_(std::move(deferred.suspended), deferred.suspended_why);
    }
    deferred.suspended.reset();
  }
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
    notices_.Broadcast(deferred.abort);
  }
}

collective::CallOptions RunManager::Call(Run& run) const {
  collective::CallOptions call;
  // A peer may hold the step for its missing worker up to the grace.
  call.timeout = options_.timeout + options_.grace;
  call.cancel = &run.cancel;
  return call;
}

// --- Slots ------------------------------------------------------------------

absl::Status RunManager::Attach(const WorkerHandle& worker,
                                proto::HelloReply* reply) {
  if (worker.index < 0 || worker.index >= options_.local_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker index ", worker.index, " is outside 0..",
                     options_.local_workers - 1, " (", options_.self,
                     " runs --local_workers=", options_.local_workers, ")"));
  }
  absl::MutexLock lock(&mu_);
  if (stop_) return ShuttingDown();
  STARLING_ASSIGN_OR_RETURN(
      const WorkerSlots::Attached attached,
      slots_.Attach(worker, run_.get(), absl::Now(), reply));
  if (attached == WorkerSlots::Attached::kResumed) {
    changed_.SignalAll();
  } else {
    declared_.Forget(worker.index);
  }
  return absl::OkStatus();
}

void RunManager::Detach(const WorkerHandle& worker) {
  absl::MutexLock lock(&mu_);
  const WorkerSlots::Detached detached =
      slots_.Detach(worker, run_.get(), absl::Now());
  if (detached == WorkerSlots::Detached::kReplaced) return;
  if (detached == WorkerSlots::Detached::kGone) declared_.Forget(worker.index);
  changed_.SignalAll();
}

void RunManager::Declare(const WorkerHandle& worker,
                         const proto::WorkerRequest& request) {
  const proto::TensorSpec& spec = request.declare_tensor().spec();
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<WorkerSlots::Declaring> declaring =
        slots_.Declare(worker, spec, run_.get());
    if (!declaring.ok()) {
      status = declaring.status();
    } else if (*declaring == WorkerSlots::Declaring::kNextRun) {
      status = declared_.Declare(worker.index, spec);
    }
  }
  worker.responder->Reply(request.id(), status);
}

// --- Rounds -----------------------------------------------------------------

std::optional<absl::Status> RunManager::RefuseLocked(
    WorkerSlots::Slot* slot, const proto::WorkerRequest& request,
    proto::WorkerResponse* answer, ScopedFd* pass_fd) {
  const bool commit =
      request.kind_case() == proto::WorkerRequest::kCommitTensors;
  if (stop_) return ShuttingDown();
  if (slot == nullptr) {
    return absl::FailedPreconditionError("this worker was replaced");
  }
  if (commit && slot->resuming && run_ != nullptr && slot->run_id == run_->id) {
    // A replacement's end of declarations: answered here, not a round.
    if (slot->resumed_declarations != run_->layout.tensors.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "declarations ended after ", slot->resumed_declarations, " of the ",
          run_->layout.tensors.size(), " tensors of run ", run_->id,
          ", which this worker resumes"));
    }
    slot->resuming = false;
    answer->mutable_commit()->set_total_workers(run_->total_workers);
    answer->mutable_commit()->set_run_id(run_->id);
    answer->mutable_commit()->set_next_step(slot->next_step);
    if (engine_->SharesParameters()) {
      *pass_fd = ScopedFd(::dup(run_->store->parameters_fd()));
    }
    return absl::OkStatus();
  }
  if (slot->run_id != 0 && (run_ == nullptr || slot->run_id != run_->id)) {
    return history_.StaleRunError(slot->run_id);
  }
  if (commit && slot->run_id != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("declarations of run ", slot->run_id, " ended already"));
  }
  if (!commit && slot->run_id == 0) {
    return absl::FailedPreconditionError(
        "tensors not committed (the client ends the declarations first)");
  }
  if (request.has_push_gradients() && slot->queue.empty() &&
      request.push_gradients().step() == slot->next_step &&
      request.push_gradients().bucket() < slot->next_bucket) {
    // A replacement pushing a bucket of the step its predecessor left in
    // the middle: that bucket was reduced with the predecessor's push.
    return absl::OkStatus();
  }
  return std::nullopt;
}

void RunManager::Submit(const WorkerHandle& worker,
                        const proto::WorkerRequest& request) {
  std::optional<absl::Status> refuse;
  proto::WorkerResponse answer;
  ScopedFd pass_fd;  // the parameters' memfd, with a resuming commit's reply
  {
    absl::MutexLock lock(&mu_);
    refuse = RefuseLocked(slots_.Find(worker), request, &answer, &pass_fd);
    if (!refuse.has_value()) {
      slots_.Enqueue(Round{worker, request, absl::Now()});
      changed_.SignalAll();
      return;
    }
  }
  worker.responder->Reply(request.id(), Annotate(*refuse, Describe(request)),
                          std::move(answer), std::move(pass_fd));
}

absl::Time RunManager::CheckGraceLocked(Deferred* deferred) {
  if (run_ == nullptr) return absl::InfiniteFuture();
  absl::StatusOr<absl::Time> earliest = slots_.CheckGrace(absl::Now());
  if (earliest.ok()) return *earliest;
  FailRunLocked(run_->id, earliest.status(), /*broadcast=*/true, deferred,
                /*may_continue=*/false);
  return absl::InfiniteFuture();
}

void RunManager::EndRunLocked(const proto::RunStatus& status,
                              Deferred* deferred) {
  history_.Record(status);
  deferred->ended.push_back(status);
  engine_->RunEnded(*run_);
  // The memory goes once the step thread, pulls and pushes let go.
  run_.reset();
  changed_.SignalAll();
}

void RunManager::FailRunLocked(uint64_t run_id, const absl::Status& why,
                               bool broadcast, Deferred* deferred,
                               bool may_continue) {
  if (run_ == nullptr || run_->id != run_id) return;
  const bool suspended = may_continue && engine_->MayContinue(*run_, why);
  STARLING_LOG(ERROR) << "run " << run_id
                      << (suspended ? " stopped on " : " failed on ")
                      << options_.self << ": " << why
                      << (suspended ? "; every shard is also on a survivor: "
                                      "it goes on if the group re-forms "
                                      "without the lost daemon"
                                    : "");
  metrics_->step_failures->Increment();
  run_->cancel.Cancel(why);
  const int64_t steps = engine_->Steps(*run_);
  proto::RunStatus status =
      RunStatusOf(*run_, proto::RunStatus::STATE_FAILED, steps);
  status.set_error(std::string(why.message()));
  status.set_ended_unix_seconds(UnixSeconds(absl::Now()));
  status.set_suspended(suspended);
  const absl::Status failed = FailedRunError(status);
  if (suspended) {
    deferred->suspended = run_;
    deferred->suspended_why = why;
  }
  slots_.RunFailed(failed, &deferred->replies);
  if (broadcast) {
    deferred->broadcast = true;
    deferred->abort.set_run_id(run_id);
    deferred->abort.set_rank(transport_->rank());
    deferred->abort.set_code(static_cast<int>(why.code()));
    deferred->abort.set_error(std::string(why.message()));
  }
  EndRunLocked(status, deferred);
}

void RunManager::AbortRun(uint64_t run_id, const absl::Status& why,
                          bool may_continue) {
  Deferred deferred;
  {
    absl::MutexLock lock(&mu_);
    if (run_ == nullptr) return;
    FailRunLocked(run_id == 0 ? run_->id : run_id, why, /*broadcast=*/false,
                  &deferred, may_continue);
  }
  Flush(deferred);
}

void RunManager::FailRun(uint64_t run_id, const absl::Status& why) {
  Deferred deferred;
  {
    absl::MutexLock lock(&mu_);
    FailRunLocked(run_id, why, /*broadcast=*/true, &deferred);
  }
  Flush(deferred);
}

bool RunManager::NextRound(std::vector<Round>* rounds,
                           std::shared_ptr<Run>* run, Deferred* deferred) {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    const absl::Time wake = CheckGraceLocked(deferred);
    if (slots_.RoundReady()) break;
    if (!deferred->replies.empty() || !deferred->ended.empty() ||
        deferred->broadcast) {
      break;  // send what the grace check produced first
    }
    changed_.WaitWithDeadline(&mu_, wake);
  }
  if (stop_) return false;
  if (slots_.RoundReady()) {
    *rounds =
        slots_.TakeRound(run_ != nullptr ? engine_->BucketsPerStep(*run_) : 1);
    *run = run_;
  }
  return true;
}

void RunManager::Answer(std::vector<Round>& rounds, const absl::Status& status,
                        const proto::WorkerResponse& reply) {
  // A committed worker gets the parameters' memfd, to map them read-only
  // (client ParametersView), where the engine shares them.
  const bool pass_parameters =
      status.ok() && engine_->SharesParameters() &&
      rounds[0].request.kind_case() == proto::WorkerRequest::kCommitTensors;
  const std::shared_ptr<Run> committed =
      pass_parameters ? current_run() : nullptr;
  const bool is_push =
      rounds[0].request.kind_case() == proto::WorkerRequest::kPushGradients;
  for (Round& round : rounds) {
    round.worker.responder->Reply(
        round.request.id(), status, reply,
        ScopedFd(committed != nullptr ? ::dup(committed->store->parameters_fd())
                                      : -1));
    if (is_push) {
      metrics_->pushes->Increment();
      metrics_->push_seconds->Observe(
          absl::ToDoubleSeconds(absl::Now() - round.submitted));
    }
  }
}

void RunManager::Loop() {
  while (true) {
    std::vector<Round> rounds;
    std::shared_ptr<Run> run;
    Deferred deferred;
    if (!NextRound(&rounds, &run, &deferred)) return;
    Flush(deferred);
    if (rounds.empty()) continue;
    proto::WorkerResponse reply;
    bool applied = false;
    const absl::Status status = Execute(rounds, run, &reply, &applied);
    const absl::Time ended = absl::Now();
    if (!status.ok() && run != nullptr) {
      absl::MutexLock lock(&mu_);
      FailRunLocked(run->id, status, /*broadcast=*/true, &deferred);
    } else if (!status.ok()) {
      STARLING_LOG(WARNING) << status;
    }
    Flush(deferred);
    Answer(rounds, status, reply);
    if (rounds[0].request.kind_case() == proto::WorkerRequest::kPushGradients &&
        (applied || !status.ok()) && on_step_ != nullptr) {
      on_step_(rounds[0].request.push_gradients().step(), status);
    }
    // The round run last, described only when asked (LocalRounds).
    absl::MutexLock lock(&mu_);
    last_round_ = std::move(rounds[0].request);
    last_round_end_ = ended;
  }
}

absl::Status RunManager::Execute(std::vector<Round>& rounds,
                                 const std::shared_ptr<Run>& run,
                                 proto::WorkerResponse* reply, bool* applied) {
  const proto::WorkerRequest::KindCase kind = rounds[0].request.kind_case();
  if (kind != proto::WorkerRequest::kCommitTensors) {
    if (run == nullptr) {
      absl::MutexLock lock(&mu_);
      return history_.StaleRunError(
          rounds[0].worker.index >= 0 ? slots_.at(rounds[0].worker.index).run_id
                                      : 0);
    }
    if (run->cancel.cancelled()) return run->cancel.status();
  }
  absl::Status status = CheckSameRequests(rounds, options_.self);
  if (status.ok()) {
    switch (kind) {
      case proto::WorkerRequest::kCommitTensors:
        status = Commit(rounds, reply);
        break;
      case proto::WorkerRequest::kPushGradients:
        status = engine_->PushRound(rounds, *run, applied);
        break;
      case proto::WorkerRequest::kCollective:
        status = shared_.Collective(rounds, run->total_workers,
                                    Describe(rounds[0].request), Call(*run));
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
  if (kind != proto::WorkerRequest::kCommitTensors) {
    status = NameLostPeers(status, *transport_);
  }
  return status;
}

// --- Beginning and ending runs ----------------------------------------------

RunFactoryOptions RunManager::RunOptions(uint64_t run_id,
                                         int total_workers) const {
  RunFactoryOptions run_options;
  run_options.run_id = run_id;
  run_options.total_workers = total_workers;
  run_options.ranks = transport_->size();
  run_options.rank = transport_->rank();
  run_options.optimizer = options_.optimizer;
  run_options.learning_rate = options_.learning_rate;
  run_options.buddy_distance = options_.buddy_distance;
  return run_options;
}

absl::Status RunManager::ContinueRun(const CarriedRun& carried,
                                     bool* still_suspended) {
  if (still_suspended != nullptr) *still_suspended = false;
  // Its workers are counted by the daemons' plan.
  const RunFactoryOptions run_options = RunOptions(carried.run_id, 0);
  collective::CallOptions call;
  call.timeout = options_.timeout;
  const absl::Time start = absl::Now();
  int64_t version = 0;
  absl::StatusOr<std::shared_ptr<Run>> run =
      engine_->ContinueRun(carried, run_options, call, &version);
  Deferred deferred;
  {
    absl::MutexLock lock(&mu_);
    if (!run.ok()) {
      const absl::Status why =
          Annotate(NameLostPeers(run.status(), *transport_),
                   absl::StrCat("carrying run ", carried.run_id, " on, on ",
                                options_.self));
      // A member lost while the state moved: the group re-forms again and
      // the run may still go on from the same carried state.
      const bool suspended = carried.run != nullptr &&
                             engine_->MayContinue(*carried.run, run.status());
      if (still_suspended != nullptr) *still_suspended = suspended;
      STARLING_LOG(ERROR) << "run " << carried.run_id
                          << (suspended ? " stopped again on " : " failed on ")
                          << options_.self << ": " << why.message()
                          << (suspended ? "; it goes on if the group re-forms "
                                          "again without the lost daemon"
                                        : "");
      proto::RunStatus status;
      status.set_run_id(carried.run_id);
      status.set_state(proto::RunStatus::STATE_FAILED);
      status.set_suspended(suspended);
      status.set_error(std::string(why.message()));
      status.set_ended_unix_seconds(UnixSeconds(absl::Now()));
      history_.Record(status);
      deferred.ended.push_back(status);
    } else {
      slots_.ContinueRun(carried.run_id, version, absl::Now());
      run_ = *run;
      engine_->RunContinued(run_, version);
      metrics_->optimizer_state_bytes->Set(
          static_cast<double>(run_->optimizer->StateBytes()));
      changed_.SignalAll();
      STARLING_LOG(WARNING)
          << "run " << carried.run_id << " goes on at step " << version
          << " on " << options_.self << " of " << transport_->size() << " ("
          << run_->total_workers << " workers; state moved in "
          << absl::FormatDuration(
                 absl::Trunc(absl::Now() - start, absl::Milliseconds(1)))
          << "); its workers resume as they reconnect";
    }
  }
  Flush(deferred);
  return run.status();
}

std::vector<proto::TensorSpec> RunManager::LocalTable(
    const std::vector<Round>& rounds, const Round** supplier,
    std::optional<uint32_t>* initial_crc32c, std::string* local_error) {
  std::vector<int> workers;
  for (const Round& round : rounds) workers.push_back(round.worker.index);
  absl::StatusOr<std::vector<proto::TensorSpec>> local =
      declared_.LocalTable(workers);
  for (int w : workers) declared_.Forget(w);
  if (!local.ok()) {
    *local_error = std::string(local.status().message());
    return {};
  }
  std::vector<proto::TensorSpec> tensors = *std::move(local);
  proto::AssignBuckets(
      engine_->BucketBytes(rounds[0].request.commit_tensors().bucket_bytes()),
      &tensors);
  // The supplier: the first local worker (by index) that set the run's
  // initial parameters, every other that set some setting the same, or
  // else the first that offered some.
  const Round* first_set = nullptr;
  const Round* first_offer = nullptr;
  SharedRounds::InitialValues set_values;
  for (const Round& round : rounds) {
    const proto::CommitTensorsRequest& commit = round.request.commit_tensors();
    if (commit.initial_parameters_size() == 0) continue;
    absl::Status checked = SharedRounds::CheckInitialParameters(round, tensors);
    if (checked.ok() && !commit.offered()) {
      absl::StatusOr<SharedRounds::InitialValues> values =
          SharedRounds::InitialValuesOf(round, tensors);
      if (!values.ok()) {
        checked = values.status();
      } else if (first_set == nullptr) {
        first_set = &round;
        set_values = *std::move(values);
      } else {
        checked = SharedRounds::CompareInitialValues(
            set_values, first_set->worker.name, *values, round.worker.name,
            tensors);
      }
    } else if (checked.ok() && first_offer == nullptr) {
      first_offer = &round;
    }
    if (!checked.ok()) {
      *local_error = absl::StrCat(checked.message(), " on ", options_.self);
      break;
    }
  }
  *supplier = first_set != nullptr ? first_set : first_offer;
  if (first_set != nullptr) {
    *initial_crc32c = SharedRounds::InitialCrc32c(set_values);
  }
  return tensors;
}

absl::Status RunManager::Commit(std::vector<Round>& rounds,
                                proto::WorkerResponse* reply) {
  const Round* supplier = nullptr;
  std::optional<uint32_t> initial_crc32c;
  std::string local_error;
  const std::vector<proto::TensorSpec> tensors =
      LocalTable(rounds, &supplier, &initial_crc32c, &local_error);
  if (rendezvous_ == nullptr) {
    return absl::FailedPreconditionError("no group to begin a run with");
  }
  absl::StatusOr<RunRendezvous::Begun> begun = rendezvous_->BeginRun(
      tensors, local_error, initial_crc32c, options_.local_workers,
      comm_->next_op_seq(), absl::Now() + options_.timeout);
  if (!begun.ok()) {
    return Annotate(begun.status(),
                    absl::StrCat("ending the declarations on ", options_.self));
  }
  int64_t first_step = 0;
  STARLING_ASSIGN_OR_RETURN(std::shared_ptr<Run> run,
                            BeginRun(tensors, *begun, supplier, &first_step));
  reply->mutable_commit()->set_total_workers(run->total_workers);
  reply->mutable_commit()->set_run_id(run->id);
  reply->mutable_commit()->set_next_step(first_step);
  STARLING_LOG(INFO) << "run " << run->id << " began on " << options_.self
                     << ": " << run->layout.tensors.size() << " tensors, "
                     << run->layout.total_elements << " parameters in "
                     << engine_->DescribeRun(*run) << ", " << run->total_workers
                     << " workers"
                     << (supplier != nullptr ? ", initial parameters from "
                                             : "")
                     << (supplier != nullptr ? supplier->worker.name : "");
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Run>> RunManager::BeginRun(
    const std::vector<proto::TensorSpec>& tensors,
    const RunRendezvous::Begun& begun, const Round* supplier,
    int64_t* first_step) {
  STARLING_ASSIGN_OR_RETURN(
      std::shared_ptr<Run> run,
      engine_->CreateRun(tensors,
                         RunOptions(begun.run_id, begun.total_workers)));
  comm_->SkipTo(begun.first_op_seq);
  metrics_->optimizer_state_bytes->Set(
      static_cast<double>(run->optimizer->StateBytes()));
  {
    absl::MutexLock lock(&mu_);
    slots_.BeginRun(run->id);
    run_ = run;
    // No pull reads version 0 before it holds the initial parameters.
    engine_->RunBegan(run);
    changed_.SignalAll();
  }
  absl::Status initialized =
      shared_.InitializeParameters(supplier, *run, Call(*run));
  if (initialized.ok()) {
    engine_->ParametersReady(*run);
    if (begun.resume_run_id != 0) {
      // Where the earlier run stopped, before any worker is told.
      absl::StatusOr<int64_t> resumed = engine_->ResumeFromCheckpoint(
          *run, begun.resume_run_id,
          RunOptions(begun.run_id, begun.total_workers), Call(*run));
      if (resumed.ok()) {
        *first_step = *resumed;
        absl::MutexLock lock(&mu_);
        slots_.StartAt(*resumed);
      } else {
        initialized =
            Annotate(resumed.status(),
                     absl::StrCat("going on from run ", begun.resume_run_id,
                                  "'s durable checkpoint"));
      }
    }
  }
  if (!initialized.ok()) {
    Deferred deferred;
    {
      absl::MutexLock lock(&mu_);
      FailRunLocked(
          run->id,
          Annotate(NameLostPeers(initialized, *transport_),
                   absl::StrCat("initial parameters on ", options_.self)),
          /*broadcast=*/true, &deferred);
    }
    Flush(deferred);
    return initialized;
  }
  return run;
}

absl::Status RunManager::Finish(Run& run) {
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
    const int64_t steps = engine_->Steps(run);
    proto::RunStatus status =
        RunStatusOf(run, proto::RunStatus::STATE_FINISHED, steps);
    status.set_ended_unix_seconds(UnixSeconds(absl::Now()));
    slots_.RunFinished();
    STARLING_LOG(INFO) << "run " << run.id << " finished on " << options_.self
                       << " after " << steps << " steps";
    EndRunLocked(status, &deferred);
  }
  Flush(deferred);
  return absl::OkStatus();
}

// --- Runs of workers and status ---------------------------------------------

absl::StatusOr<std::shared_ptr<Run>> RunManager::RunOf(
    const WorkerHandle& worker) const {
  absl::MutexLock lock(&mu_);
  const WorkerSlots::Slot* slot = slots_.Find(worker);
  if (slot == nullptr) {
    return absl::FailedPreconditionError("this worker was replaced");
  }
  if (slot->run_id == 0) {
    return absl::FailedPreconditionError(
        "tensors not committed (the client ends the declarations first)");
  }
  if (run_ == nullptr || run_->id != slot->run_id) {
    return history_.StaleRunError(slot->run_id);
  }
  return run_;
}

absl::Status RunManager::StaleRunError(uint64_t run_id) const {
  absl::MutexLock lock(&mu_);
  return history_.StaleRunError(run_id);
}

void RunManager::RecordPull(const WorkerHandle& worker, int64_t version) {
  absl::MutexLock lock(&mu_);
  WorkerSlots::Slot* slot = slots_.Find(worker);
  if (slot != nullptr) slot->last_pulled_version = version;
}

int64_t RunManager::LastPulledVersion(int index) const {
  absl::MutexLock lock(&mu_);
  return slots_.at(index).last_pulled_version;
}

std::shared_ptr<Run> RunManager::current_run() const {
  absl::MutexLock lock(&mu_);
  return run_;
}

int RunManager::attached_workers() const {
  absl::MutexLock lock(&mu_);
  return slots_.connected();
}

proto::RunStatus RunManager::run_status() const {
  absl::MutexLock lock(&mu_);
  if (run_ != nullptr) {
    return RunStatusOf(*run_, proto::RunStatus::STATE_RUNNING,
                       engine_->Steps(*run_));
  }
  proto::RunStatus status;
  if (slots_.connected() > 0) {
    status.set_state(proto::RunStatus::STATE_DECLARING);
    return status;
  }
  if (history_.last() != nullptr) return *history_.last();
  return status;
}

std::vector<proto::RunStatus> RunManager::recent_runs() const {
  absl::MutexLock lock(&mu_);
  return history_.Recent();
}

std::vector<proto::WorkerStatus> RunManager::workers() const {
  absl::MutexLock lock(&mu_);
  return slots_.Status(absl::Now());
}

proto::LocalRounds RunManager::LocalRounds(absl::Time now) const {
  proto::LocalRounds out;
  absl::MutexLock lock(&mu_);
  for (proto::WorkerStatus& w : slots_.Status(now)) {
    const WorkerSlots::Slot& slot = slots_.at(w.index());
    proto::LocalWorkerRound* r = out.add_workers();
    r->set_queued(static_cast<int>(slot.queue.size()));
    if (!slot.queue.empty()) {
      r->set_oldest_queued_seconds(
          absl::ToDoubleSeconds(now - slot.queue.front().submitted));
      r->set_oldest_queued(Describe(slot.queue.front().request));
    }
    *r->mutable_worker() = std::move(w);
  }
  if (last_round_end_ == absl::InfinitePast()) {
    out.set_last_round_ended_seconds(-1);
  } else {
    out.set_last_round(Describe(last_round_));
    out.set_last_round_ended_seconds(
        absl::ToDoubleSeconds(now - last_round_end_));
  }
  return out;
}

}  // namespace node
}  // namespace starling
