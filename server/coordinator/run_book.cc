#include "server/coordinator/run_book.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/base/status_macros.h"
#include "server/base/tensor_table.h"

namespace starling {
namespace coordinator {
namespace {

double UnixSeconds(absl::Time t) { return absl::ToUnixMicros(t) / 1e6; }

std::vector<proto::TensorSpec> TableOf(const proto::BeginRunRequest& r) {
  return std::vector<proto::TensorSpec>(r.tensors().begin(), r.tensors().end());
}

bool IsEnded(proto::RunStatus::State state) {
  return state == proto::RunStatus::STATE_FINISHED ||
         state == proto::RunStatus::STATE_FAILED;
}

}  // namespace

RunBook::RunBook(uint64_t parameter_count)
    : parameter_count_(parameter_count) {}

absl::StatusOr<proto::BeginRunResponse> RunBook::Begin(
    const std::vector<proto::BeginRunRequest>& requests, absl::Time now) {
  // A rank whose own workers disagree speaks for everyone.
  for (const proto::BeginRunRequest& r : requests) {
    if (!r.error().empty()) return absl::InvalidArgumentError(r.error());
  }
  const std::vector<proto::TensorSpec> table = TableOf(requests[0]);
  STARLING_RETURN_IF_ERROR(
      Annotate(proto::CheckTensorSpecs(table), "the tensor table of rank 0"));
  for (size_t rank = 1; rank < requests.size(); ++rank) {
    STARLING_RETURN_IF_ERROR(proto::CompareTensorTables(
        table, "rank 0", TableOf(requests[rank]), absl::StrCat("rank ", rank)));
  }
  // Workers that set the run's initial parameters (not offered) set the
  // same on every rank.
  const proto::BeginRunRequest* setter = nullptr;
  for (const proto::BeginRunRequest& r : requests) {
    if (!r.sets_initial_parameters()) continue;
    if (setter == nullptr) {
      setter = &r;
    } else if (r.initial_parameters_crc32c() !=
               setter->initial_parameters_crc32c()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the workers of rank %d and rank %d set different initial "
          "parameters (CRC32C of their float32 values %08x and %08x): every "
          "worker that sets the run's initial parameters must set the same, "
          "bit for bit (the same seed, the same values); or offer them, and "
          "the first offer is taken, as a broadcast from rank 0",
          setter->rank(), r.rank(), setter->initial_parameters_crc32c(),
          r.initial_parameters_crc32c()));
    }
  }
  const uint64_t elements = proto::TotalElements(table);
  if (parameter_count_ != 0 && elements != parameter_count_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the declared tensors hold ", elements,
        " elements but the job's parameter count is ", parameter_count_,
        " (starling-coordinator --parameter_count; 0 accepts any)"));
  }

  proto::BeginRunResponse response;
  uint64_t max_seq = 0;
  int64_t workers = 0;
  for (const proto::BeginRunRequest& r : requests) {
    max_seq = std::max(max_seq, r.next_op_seq());
    workers += r.local_workers();
  }
  if (current_.has_value()) {
    // Every rank began a new run, so the current one ended everywhere.
    current_->status.set_state(proto::RunStatus::STATE_FINISHED);
    current_->status.set_ended_unix_seconds(UnixSeconds(now));
    RetireCurrent();
  }
  response.set_run_id(next_run_id_++);
  response.set_first_op_seq(max_seq + 1);
  response.set_total_workers(static_cast<int32_t>(workers));
  for (const proto::TensorSpec& spec : table) *response.add_tensors() = spec;
  response.set_parameter_count(elements);

  Run run;
  run.status.set_run_id(response.run_id());
  run.status.set_state(proto::RunStatus::STATE_RUNNING);
  run.status.set_parameter_count(elements);
  run.status.set_total_workers(response.total_workers());
  run.status.set_started_unix_seconds(UnixSeconds(now));
  run.finished.assign(requests.size(), false);
  current_ = std::move(run);
  return response;
}

RunBook::Run* RunBook::Find(uint64_t run_id) {
  if (current_.has_value() && current_->status.run_id() == run_id) {
    return &*current_;
  }
  for (Run& run : recent_) {
    if (run.status.run_id() == run_id) return &run;
  }
  return nullptr;
}

void RunBook::RetireCurrent() {
  Run run = std::move(*current_);
  current_.reset();
  Remember(std::move(run));
}

void RunBook::Remember(Run run) {
  // Newest (highest id) first, even for runs learned late.
  auto at = std::find_if(recent_.begin(), recent_.end(), [&](const Run& r) {
    return r.status.run_id() < run.status.run_id();
  });
  recent_.insert(at, std::move(run));
  while (recent_.size() > static_cast<size_t>(kRecentRuns)) {
    recent_.pop_back();
  }
}

RunBook::Ended RunBook::End(int rank, absl::string_view who, int group_size,
                            const proto::EndRunRequest& request,
                            absl::Time now) {
  const uint64_t run_id = request.run_id();
  uint64_t& last = last_ended_[rank];
  last = std::max(last, run_id);
  Ended ended;
  Run* run = Find(run_id);
  if (run == nullptr) {
    if (run_id < next_run_id_) return ended;  // older than the recent ones
    // A run this coordinator never saw begin (it ended before a restart).
    Run learned;
    learned.status.set_run_id(run_id);
    learned.status.set_state(proto::RunStatus::STATE_FINISHED);
    learned.finished.assign(group_size, false);
    next_run_id_ = run_id + 1;
    Remember(std::move(learned));
    run = Find(run_id);
  }
  proto::RunStatus& status = run->status;
  status.set_steps(std::max(status.steps(), request.steps()));
  const bool is_current = current_.has_value() && run == &*current_;
  if (request.state() == proto::RunStatus::STATE_FAILED) {
    if (status.state() == proto::RunStatus::STATE_FAILED) {
      ended.error = status.error();
      return ended;
    }
    std::string error = std::string(who);
    if (request.failed_step() >= 0) {
      absl::StrAppend(&error, " step ", request.failed_step());
    }
    absl::StrAppend(
        &error, ": ",
        request.error().empty() ? "failed (no reason given)" : request.error());
    status.set_state(proto::RunStatus::STATE_FAILED);
    status.set_error(error);
    status.set_ended_unix_seconds(UnixSeconds(now));
    run->failed_rank = rank;
    run->failed_step = request.failed_step();
    ended.failed_now = true;
    ended.error = std::move(error);
    if (is_current) RetireCurrent();
    return ended;
  }
  if (!is_current) return ended;
  if (rank >= 0 && rank < static_cast<int>(run->finished.size())) {
    run->finished[rank] = true;
  }
  if (std::all_of(run->finished.begin(), run->finished.end(),
                  [](bool f) { return f; })) {
    status.set_state(proto::RunStatus::STATE_FINISHED);
    status.set_ended_unix_seconds(UnixSeconds(now));
    ended.finished_now = true;
    RetireCurrent();
  }
  return ended;
}

bool RunBook::FailCurrent(int rank, const std::string& error, absl::Time now) {
  if (!current_.has_value()) return false;
  current_->status.set_state(proto::RunStatus::STATE_FAILED);
  current_->status.set_error(error);
  current_->status.set_ended_unix_seconds(UnixSeconds(now));
  current_->failed_rank = rank;
  RetireCurrent();
  return true;
}

void RunBook::NoteSteps(uint64_t run_id, int64_t steps) {
  if (current_.has_value() && current_->status.run_id() == run_id) {
    current_->status.set_steps(std::max(current_->status.steps(), steps));
  }
}

std::vector<proto::RunFailure> RunBook::FailuresFor(
    int rank, const proto::RunStatus& reported) const {
  std::vector<proto::RunFailure> failures;
  auto last = last_ended_.find(rank);
  const uint64_t ended = last == last_ended_.end() ? 0 : last->second;
  for (auto it = recent_.rbegin(); it != recent_.rend(); ++it) {
    const proto::RunStatus& status = it->status;
    if (status.state() != proto::RunStatus::STATE_FAILED) continue;
    const uint64_t id = status.run_id();
    if (ended >= id || reported.run_id() > id) continue;
    if (reported.run_id() == id && IsEnded(reported.state())) continue;
    proto::RunFailure failure;
    failure.set_run_id(id);
    failure.set_rank(it->failed_rank);
    failure.set_step(it->failed_step);
    failure.set_error(status.error());
    failures.push_back(std::move(failure));
  }
  return failures;
}

void RunBook::Adopt(const proto::RunStatus& run, uint64_t highest_run_id,
                    int group_size) {
  next_run_id_ = std::max({next_run_id_, highest_run_id + 1, run.run_id() + 1});
  if (run.run_id() == 0 || Find(run.run_id()) != nullptr) return;
  Run adopted;
  adopted.status = run;
  adopted.finished.assign(group_size, false);
  if (run.state() == proto::RunStatus::STATE_RUNNING) {
    if (current_.has_value()) {
      if (current_->status.run_id() > run.run_id()) return;
      // A node runs a newer run: the one recorded ended everywhere.
      current_->status.set_state(proto::RunStatus::STATE_FINISHED);
      RetireCurrent();
    }
    current_ = std::move(adopted);
    return;
  }
  if (IsEnded(run.state())) Remember(std::move(adopted));
}

namespace {

proto::RunRecord ToRecord(const proto::RunStatus& status, int failed_rank,
                          int64_t failed_step,
                          const std::vector<bool>& finished) {
  proto::RunRecord record;
  *record.mutable_status() = status;
  record.set_failed_rank(failed_rank);
  record.set_failed_step(failed_step);
  for (bool f : finished) record.add_finished(f);
  return record;
}

}  // namespace

proto::RunBookState RunBook::Save() const {
  proto::RunBookState state;
  state.set_next_run_id(next_run_id_);
  if (current_.has_value()) {
    *state.mutable_current() =
        ToRecord(current_->status, current_->failed_rank, current_->failed_step,
                 current_->finished);
  }
  for (const Run& run : recent_) {
    *state.add_recent() =
        ToRecord(run.status, run.failed_rank, run.failed_step, run.finished);
  }
  for (const auto& [rank, run_id] : last_ended_) {
    (*state.mutable_last_ended())[rank] = run_id;
  }
  return state;
}

void RunBook::Restore(const proto::RunBookState& state) {
  const auto from_record = [](const proto::RunRecord& record) {
    Run run;
    run.status = record.status();
    run.failed_rank = record.failed_rank();
    run.failed_step = record.failed_step();
    run.finished.assign(record.finished().begin(), record.finished().end());
    return run;
  };
  next_run_id_ = std::max<uint64_t>(1, state.next_run_id());
  current_.reset();
  if (state.has_current()) current_ = from_record(state.current());
  recent_.clear();
  for (const proto::RunRecord& record : state.recent()) {
    recent_.push_back(from_record(record));
  }
  last_ended_.clear();
  for (const auto& [rank, run_id] : state.last_ended()) {
    last_ended_[rank] = run_id;
  }
}

const proto::RunStatus* RunBook::current() const {
  return current_.has_value() ? &current_->status : nullptr;
}

std::vector<proto::RunStatus> RunBook::Recent() const {
  std::vector<proto::RunStatus> runs;
  for (const Run& run : recent_) runs.push_back(run.status);
  return runs;
}

void RunBook::CarryOn(int group_size, int total_workers) {
  if (!current_.has_value()) return;
  current_->status.set_total_workers(total_workers);
  current_->finished.assign(group_size, false);
}

}  // namespace coordinator
}  // namespace starling
