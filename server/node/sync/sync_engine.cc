#include "server/node/sync/sync_engine.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"
#include "server/node/sync/continuation.h"

namespace starling {
namespace node {
namespace {

// Every run this engine is handed was made by its CreateRun.
SyncRun& AsSync(Run& run) { return static_cast<SyncRun&>(run); }
const SyncRun& AsSync(const Run& run) {
  return static_cast<const SyncRun&>(run);
}

}  // namespace

SyncEngine::SyncEngine(SyncEngineOptions options, RunManager* manager,
                       collective::Communicator* comm, NodeMetrics* metrics)
    : options_(std::move(options)),
      manager_(manager),
      metrics_(metrics),
      comm_(comm),
      data_path_(comm, metrics) {}

void SyncEngine::Stop() {
  absl::MutexLock lock(&mu_);
  stop_ = true;
}

absl::Status SyncEngine::ShuttingDown() const {
  return absl::UnavailableError(
      absl::StrCat("daemon ", options_.self, " is shutting down"));
}

// --- The run ----------------------------------------------------------------

absl::StatusOr<std::shared_ptr<Run>> SyncEngine::CreateRun(
    const std::vector<proto::TensorSpec>& tensors,
    const RunFactoryOptions& options) {
  STARLING_ASSIGN_OR_RETURN(std::shared_ptr<SyncRun> run,
                            CreateSyncRun(tensors, options));
  NoteRunMemory(*run);
  return run;
}

void SyncEngine::NoteRunMemory(const SyncRun& run) {
  metrics_->shard_bytes->Set(
      static_cast<double>(run.master.size() * sizeof(float)));
  const ShardReplica* replica = run.replica.get();
  metrics_->replica_of_rank->Set(replica != nullptr ? replica->of_rank : -1);
  metrics_->replica_bytes->Set(
      replica != nullptr
          ? static_cast<double>(replica->master.size() * sizeof(float) +
                                replica->optimizer->StateBytes())
          : 0.0);
  metrics_->replica_lag_steps->Set(0);
}

int SyncEngine::BucketsPerStep(const Run& run) const {
  return static_cast<int>(AsSync(run).buckets.size());
}

std::vector<std::pair<uint64_t, uint64_t>> SyncEngine::OwnedRanges(
    const Run& run) const {
  std::vector<std::pair<uint64_t, uint64_t>> owned;
  for (const Bucket& bucket : AsSync(run).buckets) {
    owned.emplace_back(bucket.owned_begin, bucket.owned_end);
  }
  return owned;
}

std::string SyncEngine::DescribeRun(const Run& run) const {
  const SyncRun& sync = AsSync(run);
  return absl::StrCat(sync.buckets.size(), " bucket(s), ",
                      collective::DataTypeName(sync.wire), " on the wire");
}

void SyncEngine::RunBegan(const std::shared_ptr<Run>& run) {
  absl::MutexLock lock(&mu_);
  run_ = std::static_pointer_cast<SyncRun>(run);
  applied_version_ = 0;
  // No pull reads version 0 before it holds the initial parameters.
  updating_ = true;
  next_bucket_ = 0;  // RunBegan runs on the step thread
}

void SyncEngine::ParametersReady(Run& run) {
  StepDataPath::TakeMaster(AsSync(run));
  absl::MutexLock lock(&mu_);
  if (run_.get() == &run) updating_ = false;
}

void SyncEngine::RunEnded(const Run& run) {
  absl::MutexLock lock(&mu_);
  if (run_.get() != &run) return;
  // The memory goes once the step thread and pulls let go.
  run_.reset();
  updating_ = false;
}

int64_t SyncEngine::Steps(const Run&) const {
  absl::MutexLock lock(&mu_);
  return applied_version_;
}

// --- Pushes -----------------------------------------------------------------

void SyncEngine::Push(const WorkerHandle& worker,
                      const proto::WorkerRequest& request) {
  manager_->Submit(worker, request);
}

absl::Status SyncEngine::CheckPushRound(const std::vector<Round>& rounds,
                                        const std::string& where, int buckets) {
  const int64_t step = rounds[0].request.push_gradients().step();
  const int bucket = rounds[0].request.push_gradients().bucket();
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
  return absl::OkStatus();
}

void SyncEngine::ObserveStaleness(const std::vector<Round>& rounds) {
  const int64_t step = rounds[0].request.push_gradients().step();
  for (const Round& round : rounds) {
    // The version the worker computed on, as its client says (the pull it
    // made before pushing), else the daemon's last answer.
    int64_t pulled = round.request.push_gradients().parameters_version();
    if (pulled < 0) pulled = manager_->LastPulledVersion(round.worker.index);
    if (pulled >= 0) {
      metrics_->push_staleness->Observe(static_cast<double>(step - pulled));
    }
  }
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

absl::Status SyncEngine::PushRound(std::vector<Round>& rounds, Run& base,
                                   bool* applied) {
  SyncRun& run = AsSync(base);
  const int64_t step = rounds[0].request.push_gradients().step();
  const int bucket = rounds[0].request.push_gradients().bucket();
  const int buckets = static_cast<int>(run.buckets.size());
  const std::string where = absl::StrCat(
      "step ", step,
      buckets > 1 ? absl::StrCat(" bucket ", bucket) : std::string(), " on ",
      options_.self);
  STARLING_RETURN_IF_ERROR(CheckPushRound(rounds, where, buckets));
  if (bucket == 0) ObserveStaleness(rounds);
  RecordStepTimes(rounds, run);
  if (buckets == 0) {
    // An empty model: nothing to reduce.
  } else {
    const absl::Status reduced =
        data_path_.ReduceBucket(rounds, run, bucket, manager_->Call(run));
    if (!reduced.ok()) return Annotate(reduced, where);
    if (bucket < buckets - 1) {
      next_bucket_ = bucket + 1;
      return absl::OkStatus();
    }
  }
  next_bucket_ = 0;
  return Apply(run, step, where, applied);
}

absl::Status SyncEngine::Apply(SyncRun& run, int64_t step,
                               const std::string& where, bool* applied) {
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
  const absl::Status status =
      data_path_.UpdateAndGather(run, step, manager_->Call(run));
  {
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
  }
  // Published: pulls of the new version go on while the step is
  // replicated, and the pushes are answered (the step acknowledged) once
  // every buddy holds its owner's gradient: a worker that pulls before its
  // push is answered (the trainer does) computes the next step meanwhile.
  // The interval's vote: 1 where this daemon's clock says a checkpoint is
  // due; after the all-reduce (max) every daemon holds the same answer.
  const bool voting = checkpointing() && by_interval();
  float due = 0;
  if (voting) {
    if (run.last_checkpoint == absl::InfinitePast()) {
      run.last_checkpoint = start;
    }
    due = absl::Now() - run.last_checkpoint >= options_.checkpoint_interval ? 1
                                                                            : 0;
  }
  // A failed hand-over fails the step like any collective; a replica that
  // cannot take the update leaves the run going (the owner's shard is
  // intact), logged once; the replica lags.
  if (run.replica != nullptr) {
    const absl::Status handed = data_path_.HandToBuddy(
        run, step, manager_->Call(run), voting ? &due : nullptr);
    if (!handed.ok()) return Annotate(handed, where);
    const absl::Status replicated = data_path_.UpdateReplica(run, step);
    if (!replicated.ok()) {
      STARLING_LOG(WARNING)
          << "run " << run.id << ": " << Annotate(replicated, where).message();
    }
  } else if (voting) {
    const absl::Status voted = data_path_.Vote(&due, manager_->Call(run));
    if (!voted.ok()) return Annotate(voted, where);
  }
  // Committed (on every daemon once any answers a push): due for a durable
  // checkpoint every K versions or by the interval's vote, alike on every
  // daemon.
  if (checkpointing() &&
      ((options_.checkpoint_every_steps > 0 &&
        run.master_version % options_.checkpoint_every_steps == 0) ||
       due > 0)) {
    SubmitCheckpoint(run);
    run.last_checkpoint = absl::Now();
  }
  return absl::OkStatus();
}

void SyncEngine::SubmitCheckpoint(const SyncRun& run) {
  // The copy is the step's only cost: the writer writes it meanwhile.
  options_.checkpoints->Submit(
      CheckpointFolder(options_.checkpoint_root, run.id),
      CheckpointOf(run, comm_->rank(), comm_->size(), options_.group_epoch,
                   options_.optimizer),
      absl::Now() + options_.timeout);
}

// --- Continuation -----------------------------------------------------------

bool SyncEngine::MayContinue(const Run& run, const absl::Status& why) const {
  // A stateless run ("none") goes on from any survivor's parameters; the
  // others need each lost shard's replica or a durable checkpoint.
  if (options_.optimizer != "none" && AsSync(run).replica == nullptr &&
      !checkpointing()) {
    return false;
  }
  return IsPeerLoss(why);
}

absl::StatusOr<std::shared_ptr<Run>> SyncEngine::ContinueRun(
    const CarriedRun& carried, const RunFactoryOptions& options,
    const collective::CallOptions& call, int64_t* version) {
  std::shared_ptr<SyncRun> old =
      carried.run != nullptr ? std::static_pointer_cast<SyncRun>(carried.run)
                             : nullptr;
  const int64_t held = old != nullptr ? old->master_version : 0;
  std::optional<CheckpointFolder> checkpoints;
  if (checkpointing()) {
    // What this daemon submitted is on disk (or failed) before it says
    // which versions it sees whole.
    if (!options_.checkpoints->Drain(absl::Now() + options_.timeout)) {
      STARLING_LOG(WARNING) << "run " << options.run_id
                            << ": checkpoints still being written after "
                            << absl::FormatDuration(options_.timeout)
                            << "; going on with those written whole";
    }
    checkpoints.emplace(options_.checkpoint_root, options.run_id);
  }
  std::optional<WholeVersion> restored;
  STARLING_ASSIGN_OR_RETURN(
      std::shared_ptr<SyncRun> run,
      node::ContinueRun(old, carried.old_rank, carried.old_size,
                        carried.local_workers,
                        checkpoints.has_value() ? &*checkpoints : nullptr,
                        options, comm_, call, version, &restored));
  metrics_->run_continuations->Increment();
  if (restored.has_value()) {
    metrics_->checkpoint_restores->Increment();
    STARLING_LOG(WARNING) << "run " << options.run_id
                          << " goes on from its durable checkpoint "
                          << "of version " << restored->version
                          << " (written by group epoch " << restored->epoch
                          << ", " << restored->ranks << " ranks, under "
                          << checkpoints->run_folder()
                          << "): a shard had no copy left in "
                          << "memory; this daemon's updates "
                          << restored->version + 1 << ".." << held
                          << " are rolled back and its workers told so";
  }
  if (held > *version) {
    metrics_->steps_rolled_back->Increment(
        static_cast<double>(held - *version));
  }
  NoteRunMemory(*run);
  return run;
}

void SyncEngine::RunContinued(const std::shared_ptr<Run>& run,
                              int64_t version) {
  absl::MutexLock lock(&mu_);
  run_ = std::static_pointer_cast<SyncRun>(run);
  applied_version_ = version;
  updating_ = false;
  next_bucket_ = 0;  // the step thread runs no round of it yet
  run_->store->MarkVersion(version);
}

absl::StatusOr<int64_t> SyncEngine::ResumeFromCheckpoint(
    Run& base, uint64_t from_run_id, const RunFactoryOptions& options,
    const collective::CallOptions& call) {
  if (!checkpointing()) return 0;
  SyncRun& run = AsSync(base);
  const CheckpointFolder folder(options_.checkpoint_root, from_run_id);
  std::optional<WholeVersion> from;
  STARLING_ASSIGN_OR_RETURN(
      const int64_t version,
      node::ResumeFromCheckpoint(run, folder, options, comm_, call, &from));
  if (version == 0) {
    STARLING_LOG(WARNING) << "run " << run.id << " begins from its initial "
                          << "parameters: run " << from_run_id
                          << " left no checkpoint every daemon sees whole in "
                          << folder.run_folder();
    return 0;
  }
  {
    absl::MutexLock lock(&mu_);
    if (run_.get() == &run) {
      applied_version_ = version;
      run.store->MarkVersion(version);
    }
  }
  // This run's first checkpoint is where it begins: should the cluster
  // restart again before its next one, the run after it goes on from here
  // (it looks in this run's folder only).
  SubmitCheckpoint(run);
  metrics_->checkpoint_restores->Increment();
  STARLING_LOG(WARNING) << "run " << run.id << " goes on from run "
                        << from_run_id << "'s durable checkpoint of version "
                        << version << " (written by group epoch " << from->epoch
                        << ", " << from->ranks << " ranks, under "
                        << folder.run_folder()
                        << "): its workers begin at step " << version;
  return version;
}

// --- Pulls ------------------------------------------------------------------

absl::StatusOr<std::shared_ptr<SyncRun>> SyncEngine::AwaitVersion(
    const std::shared_ptr<Run>& run, int64_t needed, absl::Time deadline,
    int64_t* returned) {
  {
    absl::MutexLock lock(&mu_);
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || run_ != run || (applied_version_ >= needed && !updating_);
    };
    mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
    if (stop_) return ShuttingDown();
    if (run_ == run) {
      if (applied_version_ < needed || updating_) {
        return absl::DeadlineExceededError(absl::StrCat(
            "parameters of version ", needed, " not ready within ",
            absl::FormatDuration(options_.timeout + options_.grace), " on ",
            options_.self, " (version ", applied_version_,
            " applied; every worker of the job must push each step)"));
      }
      // A reader: no step writes the parameters until it leaves.
      ++readers_;
      *returned = applied_version_;
      return run_;
    }
  }
  return manager_->StaleRunError(run->id);  // the run ended meanwhile
}

void SyncEngine::Pull(const WorkerHandle& worker,
                      const proto::WorkerRequest& request) {
  const int64_t version = request.pull_parameters().version();
  // Async SGD (stale synchronous parallel): the pull for step `version`
  // needs every update of the steps before version - staleness.
  const int64_t needed = std::max<int64_t>(0, version - options_.staleness);
  int64_t returned = -1;
  const absl::Time start = absl::Now();
  absl::StatusOr<std::shared_ptr<Run>> of = manager_->RunOf(worker);
  absl::StatusOr<std::shared_ptr<SyncRun>> run =
      of.ok()
          ? AwaitVersion(*of, needed, start + options_.timeout + options_.grace,
                         &returned)
          : absl::StatusOr<std::shared_ptr<SyncRun>>(of.status());
  absl::Status status = run.status();
  if (status.ok()) {
    status =
        data_path_.CopyParameters(worker, request.pull_parameters(), **run);
    {
      absl::MutexLock lock(&mu_);
      --readers_;
    }
    if (status.ok()) manager_->RecordPull(worker, returned);
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

}  // namespace node
}  // namespace starling
