#include "server/coordinator/coordinator_test_util.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace coordinator {

CoordinatorOptions TestOptions(int nodes) {
  CoordinatorOptions options;
  options.job_id = "job-a";
  options.expected_nodes = nodes;
  options.optimizer = "adam";
  options.partitions_per_epoch = 40;
  options.iterations_per_schedule = 4;
  // A LOST member keeps its rank: the tests of detection, revival and
  // restarts see the group they formed; re-formation's tests set their own.
  options.rejoin_grace = absl::Hours(1);
  return options;
}

proto::JoinRequest JoinRequestFor(int i, int local_workers) {
  proto::JoinRequest request;
  request.set_job_id("job-a");
  request.set_hostname(absl::StrCat("node-", i));
  request.set_data_address(absl::StrCat("10.0.0.", i, ":29500"));
  request.set_admin_address(absl::StrCat("10.0.0.", i, ":29501"));
  request.set_version(kStarlingVersion);
  request.mutable_capabilities()->set_local_workers(local_workers);
  return request;
}

std::vector<absl::StatusOr<proto::JoinResponse>> JoinAll(
    Coordinator* coordinator, int n) {
  std::vector<absl::StatusOr<proto::JoinResponse>> responses(
      n, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = n - 1; i >= 0; --i) {
    threads.emplace_back([coordinator, i, &responses] {
      responses[i] =
          coordinator->Join(JoinRequestFor(i), absl::Now() + absl::Seconds(20));
    });
  }
  for (std::thread& t : threads) t.join();
  return responses;
}

proto::HeartbeatRequest Beat(int rank, uint64_t group_epoch) {
  proto::HeartbeatRequest request;
  request.set_job_id("job-a");
  request.set_rank(rank);
  request.set_group_epoch(group_epoch);
  return request;
}

proto::BeginRunRequest BeginFor(int rank) {
  proto::BeginRunRequest request;
  request.set_job_id("job-a");
  request.set_rank(rank);
  request.set_group_epoch(1);
  request.set_local_workers(2);
  request.set_next_op_seq(10 + rank);
  for (const auto& [name, elements] :
       {std::pair<const char*, int64_t>{"w", 1000}, {"b", 10}}) {
    proto::TensorSpec* spec = request.add_tensors();
    spec->set_name(name);
    spec->add_shape(elements);
    spec->set_dtype(proto::DATA_TYPE_FLOAT32);
  }
  return request;
}

std::vector<absl::StatusOr<proto::BeginRunResponse>> BeginAll(
    Coordinator* coordinator, const std::vector<proto::BeginRunRequest>& ranks,
    absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) {
    deadline = absl::Now() + absl::Seconds(20);
  }
  std::vector<absl::StatusOr<proto::BeginRunResponse>> answers(
      ranks.size(), absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back(
        [&, i] { answers[i] = coordinator->BeginRun(ranks[i], deadline); });
  }
  for (std::thread& t : threads) t.join();
  return answers;
}

std::vector<proto::JoinResponse> FormAndBeginRunOne(Coordinator* coordinator,
                                                    int nodes) {
  std::vector<proto::JoinResponse> joins;
  for (auto& r : JoinAll(coordinator, nodes)) {
    EXPECT_OK(r.status());
    if (!r.ok()) return {};
    joins.push_back(*r);
  }
  std::vector<proto::BeginRunRequest> requests;
  for (int rank = 0; rank < nodes; ++rank) requests.push_back(BeginFor(rank));
  for (const auto& answer : BeginAll(coordinator, requests)) {
    EXPECT_OK(answer.status());
    if (!answer.ok()) return {};
    EXPECT_EQ(answer->run_id(), 1u);
  }
  return joins;
}

proto::EndRunRequest EndFor(int rank, uint64_t run_id,
                            proto::RunStatus::State state, int64_t steps,
                            const std::string& error, int64_t failed_step) {
  proto::EndRunRequest request;
  request.set_job_id("job-a");
  request.set_rank(rank);
  request.set_group_epoch(1);
  request.set_run_id(run_id);
  request.set_state(state);
  request.set_steps(steps);
  request.set_error(error);
  request.set_failed_step(failed_step);
  return request;
}

bool WaitForStatus(Coordinator* coordinator,
                   const std::function<bool(const proto::JobStatus&)>& ready) {
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (absl::Now() < give_up) {
    absl::StatusOr<proto::JobStatus> status = coordinator->GetJobStatus({});
    if (status.ok() && ready(*status)) return true;
    std::this_thread::yield();
  }
  return false;
}

}  // namespace coordinator
}  // namespace starling
