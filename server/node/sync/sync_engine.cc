#include "server/node/sync/sync_engine.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/tensor_table.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"
#include "server/node/run/run_factory.h"

namespace starling {
namespace node {
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
      declared_(transport->rank()),
      data_path_(comm, metrics),
      notices_(transport,
               [this](uint64_t run_id, const absl::Status& why) {
                 AbortRun(run_id, why);
               }),
      slots_(options_.local_workers, options_.grace, options_.self),
      history_(options_.history) {}

SyncEngine::~SyncEngine() { Stop(); }

void SyncEngine::Start() {
  thread_ = std::thread([this] { Loop(); });
  notices_.Start();
}

void SyncEngine::Stop() {
  Deferred deferred;
  {
    absl::MutexLock lock(&mu_);
    if (!stop_) {
      stop_ = true;
      const absl::Status down = ShuttingDown();
      if (run_ != nullptr) run_->cancel.Cancel(down);
      slots_.FailQueued(down, &deferred.replies);
      changed_.SignalAll();
    }
  }
  Flush(deferred);
  // Later calls (the destructor's) only join.
  notices_.Stop();
  if (thread_.joinable()) thread_.join();
}

std::string SyncEngine::Describe(const proto::WorkerRequest& request) const {
  return DescribeRequest(request, options_.self);
}

absl::Status SyncEngine::ShuttingDown() const {
  return absl::UnavailableError(
      absl::StrCat("daemon ", options_.self, " is shutting down"));
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
    notices_.Broadcast(deferred.abort);
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
  if (stop_) return ShuttingDown();
  STARLING_ASSIGN_OR_RETURN(const WorkerSlots::Attached attached,
                            slots_.Attach(worker, absl::Now(), reply));
  if (attached == WorkerSlots::Attached::kResumed) {
    changed_.SignalAll();
  } else {
    declared_.Forget(worker.index);
  }
  return absl::OkStatus();
}

void SyncEngine::Detach(const WorkerHandle& worker) {
  absl::MutexLock lock(&mu_);
  const WorkerSlots::Detached detached =
      slots_.Detach(worker, run_.get(), absl::Now());
  if (detached == WorkerSlots::Detached::kReplaced) return;
  if (detached == WorkerSlots::Detached::kGone) declared_.Forget(worker.index);
  changed_.SignalAll();
}

void SyncEngine::Declare(const WorkerHandle& worker,
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

void SyncEngine::Submit(const WorkerHandle& worker,
                        const proto::WorkerRequest& request) {
  absl::Status refuse;
  proto::WorkerResponse answer;
  int pass_fd = -1;  // the parameters' memfd, with a resuming commit's reply
  {
    absl::MutexLock lock(&mu_);
    WorkerSlots::Slot* slot = slots_.Find(worker);
    const bool commit =
        request.kind_case() == proto::WorkerRequest::kCommitTensors;
    if (stop_) {
      refuse = ShuttingDown();
    } else if (slot == nullptr) {
      refuse = absl::FailedPreconditionError("this worker was replaced");
    } else if (commit && slot->resuming && run_ != nullptr &&
               slot->run_id == run_->id) {
      // A replacement's end of declarations: answered here, not a round.
      if (slot->resumed_declarations != run_->layout.tensors.size()) {
        refuse = absl::InvalidArgumentError(absl::StrCat(
            "declarations ended after ", slot->resumed_declarations, " of the ",
            run_->layout.tensors.size(), " tensors of run ", run_->id,
            ", which this worker resumes"));
      } else {
        slot->resuming = false;
        answer.mutable_commit()->set_total_workers(run_->total_workers);
        answer.mutable_commit()->set_run_id(run_->id);
        answer.mutable_commit()->set_next_step(slot->next_step);
        if (options_.pushes_are_rounds) {
          pass_fd = ::dup(run_->store->parameters_fd());
        }
      }
    } else if (slot->run_id != 0 &&
               (run_ == nullptr || slot->run_id != run_->id)) {
      refuse = history_.StaleRunError(slot->run_id);
    } else if (commit && slot->run_id != 0) {
      refuse = absl::FailedPreconditionError(
          absl::StrCat("declarations of run ", slot->run_id, " ended already"));
    } else if (!commit && slot->run_id == 0) {
      refuse = absl::FailedPreconditionError(
          "tensors not committed (the client ends the declarations first)");
    } else if (request.has_push_gradients() && slot->queue.empty() &&
               request.push_gradients().step() == slot->next_step &&
               request.push_gradients().bucket() < slot->next_bucket) {
      // A replacement pushing a bucket of the step its predecessor left in
      // the middle: that bucket was reduced with the predecessor's push.
      refuse = absl::OkStatus();
    } else {
      slots_.Enqueue(Round{worker, request, absl::Now()});
      changed_.SignalAll();
      return;
    }
  }
  worker.responder->Reply(request.id(), Annotate(refuse, Describe(request)),
                          std::move(answer), pass_fd);
}

absl::Time SyncEngine::CheckGraceLocked(Deferred* deferred) {
  if (run_ == nullptr) return absl::InfiniteFuture();
  absl::StatusOr<absl::Time> earliest = slots_.CheckGrace(absl::Now());
  if (earliest.ok()) return *earliest;
  FailRunLocked(run_->id, earliest.status(), /*broadcast=*/true, deferred);
  return absl::InfiniteFuture();
}

int64_t SyncEngine::StepsLocked(Run& run) const {
  if (options_.pushes_are_rounds) return applied_version_;
  absl::MutexLock ps_lock(&run.ps_mu);
  return run.ps_updates;
}

void SyncEngine::RecordEndLocked(const proto::RunStatus& status,
                                 Deferred* deferred) {
  history_.Record(status);
  deferred->ended.push_back(status);
}

void SyncEngine::FailRunLocked(uint64_t run_id, const absl::Status& why,
                               bool broadcast, Deferred* deferred) {
  if (run_ == nullptr || run_->id != run_id) return;
  STARLING_LOG(ERROR) << "run " << run_id << " failed on " << options_.self
                      << ": " << why;
  metrics_->step_failures->Increment();
  run_->cancel.Cancel(why);
  proto::RunStatus status =
      RunStatusOf(*run_, proto::RunStatus::STATE_FAILED, StepsLocked(*run_));
  status.set_error(std::string(why.message()));
  status.set_ended_unix_seconds(UnixSeconds(absl::Now()));
  RecordEndLocked(status, deferred);
  const absl::Status failed =
      absl::AbortedError(absl::StrCat("run ", run_id, " failed at step ",
                                      applied_version_, ": ", why.message()));
  slots_.RunFailed(failed, &deferred->replies);
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

void SyncEngine::Loop() {
  // The round run last (its first request, moved out once answered),
  // recorded under the lock taken for the next one; described only when
  // asked (LocalRounds).
  proto::WorkerRequest last_round;
  absl::Time last_round_end = absl::InfinitePast();
  while (true) {
    std::vector<Round> rounds;
    std::shared_ptr<Run> run;
    Deferred deferred;
    {
      absl::MutexLock lock(&mu_);
      if (last_round_end != absl::InfinitePast()) {
        last_round_.Swap(&last_round);
        last_round_end_ = last_round_end;
        last_round_end = absl::InfinitePast();
      }
      while (!stop_) {
        const absl::Time wake = CheckGraceLocked(&deferred);
        if (slots_.RoundReady()) break;
        if (!deferred.replies.empty() || !deferred.ended.empty() ||
            deferred.broadcast) {
          break;  // send what the grace check produced first
        }
        changed_.WaitWithDeadline(&mu_, wake);
      }
      if (stop_) return;
      if (slots_.RoundReady()) {
        rounds = slots_.TakeRound(
            run_ != nullptr ? static_cast<int>(run_->buckets.size()) : 1);
        run = run_;
      }
    }
    Flush(deferred);
    if (rounds.empty()) continue;
    proto::WorkerResponse reply;
    bool applied = false;
    absl::Status status = Execute(rounds, run, &reply, &applied);
    const absl::Time ended = absl::Now();
    const bool is_push =
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
      if (is_push) {
        metrics_->pushes->Increment();
        metrics_->push_seconds->Observe(
            absl::ToDoubleSeconds(absl::Now() - round.submitted));
      }
    }
    if (is_push && (applied || !status.ok()) && on_step_ != nullptr) {
      on_step_(rounds[0].request.push_gradients().step(), status);
    }
    last_round = std::move(rounds[0].request);
    last_round_end = ended;
  }
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
        status = Step(rounds, *run, applied);
        break;
      case proto::WorkerRequest::kAllReduce:
        status = data_path_.AllReduce(rounds, Describe(rounds[0].request),
                                      Call(*run));
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

absl::Status SyncEngine::Commit(std::vector<Round>& rounds,
                                proto::WorkerResponse* reply) {
  std::vector<int> workers;
  for (const Round& round : rounds) workers.push_back(round.worker.index);
  absl::StatusOr<std::vector<proto::TensorSpec>> local =
      declared_.LocalTable(workers);
  std::vector<proto::TensorSpec> tensors;
  std::string local_error;
  // The first local worker (by index) that supplies initial parameters.
  const Round* supplier = nullptr;
  if (local.ok()) {
    tensors = std::move(*local);
    // Parameter-server mode updates one flat shard: one bucket.
    proto::AssignBuckets(options_.pushes_are_rounds
                             ? rounds[0].request.commit_tensors().bucket_bytes()
                             : 0,
                         &tensors);
    for (const Round& round : rounds) {
      if (round.request.commit_tensors().initial_parameters_size() > 0) {
        supplier = &round;
        break;
      }
    }
    if (supplier != nullptr) {
      const absl::Status checked =
          StepDataPath::CheckInitialParameters(*supplier, tensors);
      if (!checked.ok()) local_error = std::string(checked.message());
    }
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
  RunFactoryOptions run_options;
  run_options.run_id = begun->run_id;
  run_options.total_workers = begun->total_workers;
  run_options.ranks = transport_->size();
  run_options.rank = transport_->rank();
  run_options.optimizer = options_.optimizer;
  run_options.learning_rate = options_.learning_rate;
  run_options.master_shard = options_.pushes_are_rounds;
  STARLING_ASSIGN_OR_RETURN(std::shared_ptr<Run> run,
                            CreateRun(tensors, run_options));
  comm_->SkipTo(begun->first_op_seq);
  metrics_->shard_bytes->Set(static_cast<double>(
      options_.pushes_are_rounds ? run->master.size() * sizeof(float)
                                 : run->store->ShardBytes()));
  metrics_->optimizer_state_bytes->Set(
      static_cast<double>(run->optimizer->StateBytes()));
  reply->mutable_commit()->set_total_workers(run->total_workers);
  reply->mutable_commit()->set_run_id(run->id);
  reply->mutable_commit()->set_next_step(0);
  next_bucket_ = 0;
  {
    absl::MutexLock lock(&mu_);
    slots_.BeginRun(run->id);
    applied_version_ = 0;
    // No pull reads version 0 before it holds the initial parameters.
    updating_ = true;
    run_ = run;
    changed_.SignalAll();
  }
  absl::Status initialized =
      data_path_.InitializeParameters(supplier, *run, Call(*run));
  Deferred deferred;
  {
    absl::MutexLock lock(&mu_);
    updating_ = false;
    if (!initialized.ok()) {
      FailRunLocked(
          run->id,
          Annotate(NameLostPeers(initialized, *transport_),
                   absl::StrCat("initial parameters on ", options_.self)),
          /*broadcast=*/true, &deferred);
    }
    changed_.SignalAll();
  }
  Flush(deferred);
  if (!initialized.ok()) return initialized;
  STARLING_LOG(INFO) << "run " << run->id << " began on " << options_.self
                     << ": " << run->layout.tensors.size() << " tensors, "
                     << run->layout.total_elements << " parameters in "
                     << run->buckets.size() << " bucket(s), "
                     << collective::DataTypeName(run->wire) << " on the wire, "
                     << run->total_workers << " workers"
                     << (supplier != nullptr ? ", initial parameters from "
                                             : "")
                     << (supplier != nullptr ? supplier->worker.name : "");
  return absl::OkStatus();
}

void SyncEngine::RecordStepTimes(const std::vector<Round>& rounds, Run& run) {
  for (const Round& round : rounds) {
    const proto::PushGradientsRequest& push = round.request.push_gradients();
    metrics_->progress->Record(round.worker.index, push);
    if (push.step_seconds() > 0) {
      metrics_->worker_compute_seconds->Increment(push.compute_seconds());
      metrics_->worker_step_seconds->Increment(push.step_seconds());
      metrics_->compute_ratio->Set(
          run.AddStepTimes(push.compute_seconds(), push.step_seconds()));
    }
  }
}

absl::Status SyncEngine::Step(std::vector<Round>& rounds, Run& run,
                              bool* applied) {
  const int64_t step = rounds[0].request.push_gradients().step();
  const int bucket = rounds[0].request.push_gradients().bucket();
  const int buckets = static_cast<int>(run.buckets.size());
  const std::string where = absl::StrCat(
      "step ", step,
      buckets > 1 ? absl::StrCat(" bucket ", bucket) : std::string(), " on ",
      options_.self);
  {
    absl::MutexLock lock(&mu_);
    if (step != applied_version_) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": pushed for step ", step,
                       " but the next step is ", applied_version_));
    }
    const int expected = next_bucket_;
    if (bucket != expected && !(buckets == 0 && bucket == 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": bucket ", bucket, " pushed where bucket ", expected,
          " of the run's ", buckets,
          " was next (buckets are pushed in order, each once a step)"));
    }
    if (bucket == 0) {
      for (const Round& round : rounds) {
        // The version the worker computed on, as its client says (the
        // pull it made before pushing), else the daemon's last answer.
        int64_t pulled = round.request.push_gradients().parameters_version();
        if (pulled < 0)
          pulled = slots_.at(round.worker.index).last_pulled_version;
        if (pulled >= 0) {
          metrics_->push_staleness->Observe(static_cast<double>(step - pulled));
        }
      }
    }
  }
  RecordStepTimes(rounds, run);
  if (buckets == 0) {
    // An empty model: nothing to reduce.
  } else {
    const absl::Status reduced =
        data_path_.ReduceBucket(rounds, run, bucket, Call(run));
    if (!reduced.ok()) return Annotate(reduced, where);
    if (bucket < buckets - 1) {
      next_bucket_ = bucket + 1;
      return absl::OkStatus();
    }
  }
  next_bucket_ = 0;
  {
    absl::MutexLock lock(&mu_);
    // Block new pulls and wait for the current readers to leave: each
    // copies from memory into a worker's pool, no I/O, so the bound is
    // only against our own bug.
    updating_ = true;
    if (!mu_.AwaitWithDeadline(
            absl::Condition(
                +[](int* readers) { return *readers == 0; }, &readers_),
            absl::Now() + options_.timeout)) {
      updating_ = false;
      return absl::InternalError(absl::StrCat(
          where, ": ", readers_, " pull(s) still copying the parameters after ",
          absl::FormatDuration(options_.timeout)));
    }
  }
  const absl::Time start = absl::Now();
  shard::ShardStore& store = *run.store;
  // Views of version `step` (held by workers that all pushed now) end.
  store.MarkWriting(step + 1);
  const absl::Status status = data_path_.UpdateAndGather(run, step, Call(run));
  absl::MutexLock lock(&mu_);
  updating_ = false;
  if (!status.ok()) return Annotate(status, where);
  if (run_.get() != &run) {
    return absl::AbortedError(absl::StrCat(where, ": the run ended"));
  }
  store.MarkVersion(step + 1);
  applied_version_ = step + 1;
  *applied = true;
  metrics_->steps->Increment();
  metrics_->step_seconds->Observe(absl::ToDoubleSeconds(absl::Now() - start));
  changed_.SignalAll();
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
    proto::RunStatus status =
        RunStatusOf(run, proto::RunStatus::STATE_FINISHED, StepsLocked(run));
    status.set_ended_unix_seconds(UnixSeconds(absl::Now()));
    RecordEndLocked(status, &deferred);
    slots_.RunFinished();
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

void SyncEngine::Pull(const WorkerHandle& worker,
                      const proto::WorkerRequest& request) {
  const int64_t version = request.pull_parameters().version();
  // Async SGD (stale synchronous parallel): the pull for step `version`
  // needs every update of the steps before version - staleness.
  const int64_t needed = std::max<int64_t>(0, version - options_.staleness);
  int64_t returned = -1;
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + options_.timeout + options_.grace;
  std::shared_ptr<Run> run;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    const WorkerSlots::Slot& slot = slots_.at(worker.index);
    const uint64_t run_id = slot.run_id;
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || run_ == nullptr || run_->id != run_id ||
             (applied_version_ >= needed && !updating_);
    };
    if (slot.worker.session != worker.session) {
      status = absl::FailedPreconditionError("this worker was replaced");
    } else if (run_id == 0) {
      status = absl::FailedPreconditionError(
          "tensors not committed (the client ends the declarations first)");
    } else {
      mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
      if (stop_) {
        status = ShuttingDown();
      } else if (run_ == nullptr || run_->id != run_id) {
        status = history_.StaleRunError(run_id);
      } else if (applied_version_ < needed || updating_) {
        status = absl::DeadlineExceededError(absl::StrCat(
            "parameters of version ", needed, " not ready within ",
            absl::FormatDuration(options_.timeout + options_.grace), " on ",
            options_.self, " (version ", applied_version_,
            " applied; every worker of the job must push each step)"));
      } else {
        run = run_;
        ++readers_;
        returned = applied_version_;
      }
    }
  }
  if (status.ok()) {
    // A reader: no step writes the parameters until it leaves.
    status = data_path_.CopyParameters(worker, request.pull_parameters(), *run);
    absl::MutexLock lock(&mu_);
    --readers_;
    WorkerSlots::Slot* slot = slots_.Find(worker);
    if (status.ok() && slot != nullptr) slot->last_pulled_version = returned;
  }
  metrics_->pulls->Increment();
  metrics_->pull_seconds->Observe(absl::ToDoubleSeconds(absl::Now() - start));
  proto::WorkerResponse answer;
  if (!status.ok()) {
    status = Annotate(status, absl::StrCat("pull of version ", version, " on ",
                                           options_.self));
  } else {
    answer.mutable_pull()->set_version(returned);
  }
  worker.responder->Reply(request.id(), status, std::move(answer));
}

std::shared_ptr<Run> SyncEngine::current_run() const {
  absl::MutexLock lock(&mu_);
  return run_;
}

int SyncEngine::attached_workers() const {
  absl::MutexLock lock(&mu_);
  return slots_.connected();
}

proto::RunStatus SyncEngine::run_status() const {
  absl::MutexLock lock(&mu_);
  if (run_ != nullptr) {
    return RunStatusOf(*run_, proto::RunStatus::STATE_RUNNING,
                       StepsLocked(*run_));
  }
  proto::RunStatus status;
  if (slots_.connected() > 0) {
    status.set_state(proto::RunStatus::STATE_DECLARING);
    return status;
  }
  if (history_.last() != nullptr) return *history_.last();
  return status;
}

std::vector<proto::RunStatus> SyncEngine::recent_runs() const {
  absl::MutexLock lock(&mu_);
  return history_.Recent();
}

std::vector<proto::WorkerStatus> SyncEngine::workers() const {
  absl::MutexLock lock(&mu_);
  return slots_.Status(absl::Now());
}

proto::LocalRounds SyncEngine::LocalRounds(absl::Time now) const {
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
