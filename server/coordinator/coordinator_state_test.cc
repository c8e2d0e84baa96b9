// A coordinator with a record (a state file, or a key in etcd: each test
// runs on both) records its job and a coordinator started on that record
// resumes it: the group, its key, its epoch and the run numbering; a
// record no member comes back to is given up, and the next group takes the
// epoch after it.
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/clock.h"
#include "server/base/status_matchers.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_test_util.h"
#include "server/coordinator/etcd_store.h"
#include "server/coordinator/etcd_test_server.h"
#include "server/metrics/metrics_registry.h"
#include "server/metrics/text_format.h"

namespace starling {
namespace coordinator {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// The parameter: "file" (--state_file) or "etcd" (--state_etcd).
class CoordinatorStateTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    etcd_ = new EtcdTestServer();
    const absl::Status started = etcd_->Start();
    ASSERT_TRUE(started.ok()) << started;
  }
  static void TearDownTestSuite() {
    delete etcd_;
    etcd_ = nullptr;
  }

  bool InEtcd() const { return GetParam() == "etcd"; }

  // A record of this test's own.
  CoordinatorOptions Options(int nodes) {
    CoordinatorOptions options = TestOptions(nodes);
    const std::string name =
        ::testing::UnitTest::GetInstance()->current_test_info()->name();
    if (InEtcd()) {
      options.state_etcd = etcd_->client_url();
      options.state_etcd_prefix = absl::StrCat(
          "/state-test/", name.substr(0, name.find('/')), "/", GetParam());
    } else {
      const char* dir = std::getenv("TEST_TMPDIR");
      options.state_file =
          absl::StrCat(dir != nullptr ? dir : "/tmp", "/",
                       name.substr(0, name.find('/')), ".state");
    }
    return options;
  }

  // Replaces the record of `options` with `bytes`, as a damaged disk or an
  // operator's mistake would.
  static void OverwriteRecord(const CoordinatorOptions& options,
                              const std::string& bytes) {
    if (options.state_etcd.empty()) {
      std::ofstream out(options.state_file, std::ios::trunc);
      out << bytes;
      return;
    }
    ASSERT_OK(etcd_->Put(
        EtcdStore::KeyFor(options.state_etcd_prefix, options.job_id), bytes));
  }

  // A coordinator on `options`, with a registry of its own (a restarted
  // process registers its metrics afresh).
  absl::StatusOr<std::unique_ptr<Coordinator>> Start(
      const CoordinatorOptions& options) {
    registries_.push_back(std::make_unique<metrics::MetricsRegistry>());
    return Coordinator::Create(options, &clock_, registries_.back().get());
  }

  // Forms a group of `nodes`, begins run 1 on it, and stops (the record
  // written): the coordinator a restart replaces.
  void FormRunAndStop(const CoordinatorOptions& options, int nodes) {
    ASSERT_OK_AND_ASSIGN(auto first, Start(options));
    joins_ = FormAndBeginRunOne(first.get(), nodes);
    ASSERT_EQ(joins_.size(), static_cast<size_t>(nodes));
    ASSERT_OK(first->FlushStateForTesting(absl::Now() + absl::Seconds(10)));
  }

  // Rank `rank` re-registers as a node that finished run 1 and declares
  // the next (it reports no run id: the numbering must come from the
  // record).
  proto::RejoinRequest RejoinFor(int rank) {
    const proto::JoinResponse& join = joins_[rank];
    proto::RejoinRequest request;
    *request.mutable_node() = JoinRequestFor(rank);
    request.set_rank(join.rank());
    request.set_group_epoch(join.group_epoch());
    *request.mutable_peers() = join.peers();
    *request.mutable_shard_map() = join.shard_map();
    return request;
  }

  FakeClock clock_;
  std::vector<std::unique_ptr<metrics::MetricsRegistry>> registries_;
  std::vector<proto::JoinResponse> joins_;
  static EtcdTestServer* etcd_;
};

EtcdTestServer* CoordinatorStateTest::etcd_ = nullptr;

INSTANTIATE_TEST_SUITE_P(Stores, CoordinatorStateTest,
                         ::testing::Values("file", "etcd"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST_P(CoordinatorStateTest, ARestartResumesTheGroupItsKeyAndTheRunNumbers) {
  const CoordinatorOptions options = Options(3);
  FormRunAndStop(options, 3);
  ASSERT_FALSE(joins_[0].group_key().empty());

  ASSERT_OK_AND_ASSIGN(auto restarted, Start(options));
  // Before anyone re-registers, the record alone gives the group.
  ASSERT_OK_AND_ASSIGN(proto::JobStatus status, restarted->GetJobStatus({}));
  EXPECT_EQ(status.group_epoch(), 1u);
  ASSERT_EQ(status.nodes_size(), 3);
  for (const proto::NodeStatus& node : status.nodes()) {
    EXPECT_EQ(node.peer().health(), proto::NODE_HEALTH_JOINING);
  }
  for (int rank = 0; rank < 3; ++rank) {
    ASSERT_OK_AND_ASSIGN(proto::JoinResponse again,
                         restarted->Rejoin(RejoinFor(rank)));
    EXPECT_EQ(again.rank(), rank);
    EXPECT_EQ(again.group_epoch(), 1u);
    // The data plane's key survives: a node that re-forms later proves the
    // same one.
    EXPECT_EQ(again.group_key(), joins_[rank].group_key());
  }
  std::vector<proto::BeginRunRequest> requests;
  for (int rank = 0; rank < 3; ++rank) requests.push_back(BeginFor(rank));
  for (const auto& answer : BeginAll(restarted.get(), requests)) {
    ASSERT_OK(answer.status());
    EXPECT_EQ(answer->run_id(), 2u) << "run ids continue from the record";
  }
}

// A group re-formed around a lost member carries run 1 on; a coordinator
// restarted on the record tells a survivor that re-registers so too, and
// hands out the data schedule the run continued.
TEST_P(CoordinatorStateTest, ARestartKeepsTheRunTheGroupCarriesOn) {
  CoordinatorOptions options = Options(3);
  options.rejoin_grace = absl::ZeroDuration();
  ASSERT_OK_AND_ASSIGN(auto first, Start(options));
  joins_ = FormAndBeginRunOne(first.get(), 3);
  ASSERT_EQ(joins_.size(), 3u);
  // Node 1 falls silent: epoch 2 of nodes 0 and 2 carries run 1.
  for (int second = 0; second < 6; ++second) {
    clock_.Advance(absl::Seconds(1));
    for (int node : {0, 2}) {
      (void)first->Heartbeat(coordinator::Beat(node, 1));
    }
  }
  std::vector<proto::JoinResponse> moved;
  for (int node : {0, 2}) {
    ASSERT_OK_AND_ASSIGN(proto::JoinResponse m, first->Rejoin(RejoinFor(node)));
    ASSERT_EQ(m.group_epoch(), 2u);
    ASSERT_EQ(m.carried_run_id(), 1u);
    moved.push_back(m);
  }
  // The run went on at iteration 5: its schedule continues the epoch over
  // the 2 workers left (partitions 15, 17, ... for rank 0).
  proto::GetScheduleRequest schedule;
  schedule.set_job_id("job-a");
  schedule.set_rank(0);
  schedule.set_group_epoch(2);
  schedule.set_next_iteration(5);
  ASSERT_OK_AND_ASSIGN(proto::Schedule before, first->GetSchedule(schedule));
  ASSERT_GT(before.iterations_size(), 1);
  EXPECT_EQ(before.iterations(1).assignments(0).partitions(0), 17u);
  ASSERT_OK(first->FlushStateForTesting(absl::Now() + absl::Seconds(10)));
  first.reset();

  ASSERT_OK_AND_ASSIGN(auto restarted, Start(options));
  for (size_t i = 0; i < moved.size(); ++i) {
    proto::RejoinRequest request;
    *request.mutable_node() = JoinRequestFor(i == 0 ? 0 : 2);
    request.set_rank(moved[i].rank());
    request.set_group_epoch(2);
    *request.mutable_peers() = moved[i].peers();
    *request.mutable_shard_map() = moved[i].shard_map();
    ASSERT_OK_AND_ASSIGN(proto::JoinResponse again, restarted->Rejoin(request));
    EXPECT_EQ(again.group_epoch(), 2u);
    EXPECT_EQ(again.carried_run_id(), 1u);
  }
  // The record kept the continued plan.
  schedule.set_next_iteration(6);
  ASSERT_OK_AND_ASSIGN(proto::Schedule after, restarted->GetSchedule(schedule));
  ASSERT_GT(after.iterations_size(), 0);
  EXPECT_EQ(after.iterations(0).assignments(0).partitions(0), 17u);
  EXPECT_EQ(after.total_iterations(), before.total_iterations());
}

TEST_P(CoordinatorStateTest, ARejoinThatDiffersFromTheRecordIsRefused) {
  const CoordinatorOptions options = Options(2);
  FormRunAndStop(options, 2);
  ASSERT_OK_AND_ASSIGN(auto restarted, Start(options));
  proto::RejoinRequest forged = RejoinFor(1);
  forged.mutable_peers(0)->set_data_address("10.9.9.9:29500");
  EXPECT_THAT(
      restarted->Rejoin(forged),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               AllOf(HasSubstr("10.9.9.9:29500"),
                     HasSubstr("this coordinator runs group epoch 1"))));
}

TEST_P(CoordinatorStateTest, AMemberJoiningAfreshGivesTheRecordedGroupUp) {
  const CoordinatorOptions options = Options(2);
  FormRunAndStop(options, 2);
  const std::string old_key = joins_[0].group_key();
  ASSERT_OK_AND_ASSIGN(auto restarted, Start(options));
  // Every member restarted (a whole-job restart): they join, not rejoin.
  std::vector<proto::JoinResponse> fresh;
  for (auto& r : JoinAll(restarted.get(), 2)) {
    ASSERT_OK(r.status());
    fresh.push_back(*r);
  }
  EXPECT_EQ(fresh[0].group_epoch(), 2u);
  EXPECT_NE(fresh[0].group_key(), old_key);
  // A daemon of the given-up group that wakes up cannot bring it back.
  EXPECT_THAT(restarted->Rejoin(RejoinFor(0)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("group epoch 1")));
  // The run of the given-up group failed; run ids go on.
  ASSERT_OK_AND_ASSIGN(proto::JobStatus status, restarted->GetJobStatus({}));
  ASSERT_GE(status.recent_runs_size(), 1);
  EXPECT_EQ(status.recent_runs(0).run_id(), 1u);
  EXPECT_EQ(status.recent_runs(0).state(), proto::RunStatus::STATE_FAILED);
  std::vector<proto::BeginRunRequest> requests;
  for (int rank = 0; rank < 2; ++rank) {
    proto::BeginRunRequest request = BeginFor(rank);
    request.set_group_epoch(2);
    requests.push_back(request);
  }
  for (const auto& answer : BeginAll(restarted.get(), requests)) {
    ASSERT_OK(answer.status());
    EXPECT_EQ(answer->run_id(), 2u);
  }
  // The metrics say which epoch runs and that the record is being written.
  ASSERT_OK(restarted->FlushStateForTesting(absl::Now() + absl::Seconds(10)));
  const std::string text =
      metrics::EncodeTextFormat(registries_.back()->Collect());
  EXPECT_THAT(text, HasSubstr("starling_coordinator_group_epoch 2\n"));
  EXPECT_THAT(text, HasSubstr("starling_coordinator_state_writes_total{"
                              "result=\"ok\"}"));
  EXPECT_THAT(text, Not(HasSubstr("result=\"failed\"")));
}

TEST_P(CoordinatorStateTest, AStrangerWaitsUntilTheRecordedMembersAreLost) {
  const CoordinatorOptions options = Options(1);
  FormRunAndStop(options, 1);
  ASSERT_OK_AND_ASSIGN(auto restarted, Start(options));
  const proto::JoinRequest stranger = JoinRequestFor(7);
  EXPECT_THAT(
      restarted->Join(stranger, absl::Now() + absl::Milliseconds(300)),
      StatusIs(absl::StatusCode::kDeadlineExceeded,
               AllOf(HasSubstr("node-7"), HasSubstr("resumed the group"),
                     HasSubstr("re-register"))));
  // The recorded member never comes back: past the heartbeat timeout it is
  // LOST, and the group is given up for the one that forms now.
  clock_.Advance(options.heartbeat_timeout + absl::Seconds(1));
  ASSERT_OK_AND_ASSIGN(
      proto::JoinResponse joined,
      restarted->Join(stranger, absl::Now() + absl::Seconds(10)));
  EXPECT_EQ(joined.group_epoch(), 2u);
  EXPECT_EQ(joined.peers(0).hostname(), "node-7");
}

TEST_P(CoordinatorStateTest, ARecordThatDoesNotCheckStopsTheStart) {
  const CoordinatorOptions options = Options(1);
  OverwriteRecord(options, "starling-coordinator-state 1\ngarbage");
  EXPECT_THAT(
      Start(options),
      StatusIs(absl::StatusCode::kDataLoss,
               HasSubstr(InEtcd() ? EtcdStore::KeyFor(options.state_etcd_prefix,
                                                      options.job_id)
                                  : options.state_file)));
}

// In etcd each job has a key of its own (PREFIX/JOB); a file may be named
// for two jobs by mistake.
TEST_P(CoordinatorStateTest, AnotherJobsRecordIsRefused) {
  if (InEtcd()) GTEST_SKIP() << "each job's key in etcd is its own";
  CoordinatorOptions options = Options(1);
  FormRunAndStop(options, 1);
  options.job_id = "job-b";
  EXPECT_THAT(Start(options),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("records job 'job-a', not 'job-b'"),
                             HasSubstr(options.state_file))));
}

}  // namespace
}  // namespace coordinator
}  // namespace starling
