// CoordinatorLink against an in-process coordinator on loopback gRPC: join
// (also before the coordinator is up), heartbeats from the join on, runs
// begun by every link at once, run ends and failures told to the others,
// and a coordinator restarted on the same port that learns the running
// group from the links' re-registrations.
#include "server/node/link/coordinator_link.h"

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/base/clock.h"
#include "server/base/logging.h"
#include "server/base/status_matchers.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_service.h"
#include "server/coordinator/test_binaries.h"
#include "server/metrics/metrics_registry.h"

namespace starling {
namespace node {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

constexpr char kJob[] = "link-job";

absl::Time Soon() { return absl::Now() + absl::Seconds(20); }

// What one node reports about itself, and what its link told it.
struct Node {
  absl::Mutex mu;
  uint64_t iteration ABSL_GUARDED_BY(mu) = 0;
  proto::RunStatus run ABSL_GUARDED_BY(mu);
  std::vector<proto::WorkerStatus> workers ABSL_GUARDED_BY(mu);
  std::vector<int> lost ABSL_GUARDED_BY(mu);
  std::vector<proto::RunFailure> failures ABSL_GUARDED_BY(mu);
  // The groups on_regroup told, in order.
  std::vector<proto::JoinResponse> groups ABSL_GUARDED_BY(mu);

  void SetRun(uint64_t id, proto::RunStatus::State state, int64_t steps = 0) {
    absl::MutexLock lock(&mu);
    run.set_run_id(id);
    run.set_state(state);
    run.set_steps(steps);
  }
  // Waits until `ready` holds (evaluated under mu), or 20s.
  bool Await(bool (*ready)(Node*)) {
    absl::MutexLock lock(&mu);
    return mu.AwaitWithDeadline(absl::Condition(ready, this), Soon());
  }
};

std::vector<proto::TensorSpec> Table(int64_t w_elements = 1000) {
  std::vector<proto::TensorSpec> table(2);
  table[0].set_name("w");
  table[0].add_shape(w_elements);
  table[0].set_dtype(proto::DATA_TYPE_FLOAT32);
  table[1].set_name("b");
  table[1].add_shape(10);
  table[1].set_dtype(proto::DATA_TYPE_FLOAT32);
  return table;
}

class CoordinatorLinkTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (auto& link : links_) link->Stop();
    StopCoordinator();
    SetLogSinkForTesting(nullptr);
  }

  // A fresh coordinator for `nodes` nodes, on port_ (any free port the
  // first time).
  void StartCoordinator(int nodes) {
    coordinator::CoordinatorOptions options;
    options.job_id = kJob;
    options.expected_nodes = nodes;
    options.iterations_per_schedule = 4;
    options.partitions_per_epoch = 20;
    options.epochs = 2;
    options.rejoin_grace = rejoin_grace_;
    options.replicas = replicas_;
    registries_.push_back(std::make_unique<metrics::MetricsRegistry>());
    ASSERT_OK_AND_ASSIGN(coordinator_,
                         coordinator::Coordinator::Create(
                             options, &clock_, registries_.back().get()));
    service_ =
        std::make_unique<coordinator::CoordinatorService>(coordinator_.get());
    grpc::ServerBuilder builder;
    int bound = 0;
    builder.AddListeningPort(absl::StrCat("127.0.0.1:", port_),
                             grpc::InsecureServerCredentials(), &bound);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(bound, 0);
    port_ = bound;
  }

  void StopCoordinator() {
    if (coordinator_ != nullptr) coordinator_->Shutdown();
    if (server_ != nullptr) {
      server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
      server_->Wait();
    }
    server_.reset();
    service_.reset();
    coordinator_.reset();
  }

  CoordinatorLinkOptions LinkOptions(int i) const {
    CoordinatorLinkOptions options;
    options.coordinator = absl::StrCat("127.0.0.1:", port_);
    options.job_id = kJob;
    options.hostname = absl::StrCat("node-", i);
    options.data_address = absl::StrCat("127.0.0.1:", 40000 + i);
    options.local_workers = 2;
    options.join_timeout = join_timeout_;
    options.heartbeat_interval = heartbeat_interval_;
    options.rpc_timeout = absl::Seconds(2);
    return options;
  }

  // Link i, reporting and recording into nodes_[i].
  CoordinatorLink* AddLink(int i) {
    nodes_.resize(std::max<size_t>(nodes_.size(), i + 1));
    if (nodes_[i] == nullptr) nodes_[i] = std::make_unique<Node>();
    Node* node = nodes_[i].get();
    CoordinatorLinkCallbacks callbacks;
    callbacks.fill_status = [node](proto::HeartbeatRequest* beat) {
      absl::MutexLock lock(&node->mu);
      beat->set_iteration(node->iteration);
      *beat->mutable_run() = node->run;
      for (const proto::WorkerStatus& w : node->workers) {
        *beat->add_workers() = w;
      }
    };
    callbacks.on_lost_ranks = [node](const std::vector<int>& lost) {
      absl::MutexLock lock(&node->mu);
      node->lost = lost;
    };
    callbacks.on_run_failed = [node](const proto::RunFailure& failure) {
      absl::MutexLock lock(&node->mu);
      node->failures.push_back(failure);
    };
    callbacks.on_regroup = [node](const proto::JoinResponse& group) {
      absl::MutexLock lock(&node->mu);
      node->groups.push_back(group);
    };
    absl::StatusOr<std::unique_ptr<CoordinatorLink>> link =
        CoordinatorLink::Create(LinkOptions(i), std::move(callbacks));
    EXPECT_OK(link.status());
    if (!link.ok()) return nullptr;
    links_.resize(std::max<size_t>(links_.size(), i + 1));
    links_[i] = *std::move(link);
    return links_[i].get();
  }

  // n links that join concurrently; their Join answers by link.
  std::vector<proto::JoinResponse> JoinAll(int n) {
    for (int i = 0; i < n; ++i) AddLink(i);
    std::vector<proto::JoinResponse> answers(n);
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([this, i, &answers] {
        absl::StatusOr<proto::JoinResponse> answer = links_[i]->Join();
        EXPECT_OK(answer.status());
        if (answer.ok()) answers[i] = *answer;
      });
    }
    for (std::thread& t : threads) t.join();
    return answers;
  }

  // BeginRun on every link at once (link i: `tables[i]`).
  std::vector<absl::StatusOr<proto::BeginRunResponse>> BeginAll(
      const std::vector<std::vector<proto::TensorSpec>>& tables) {
    std::vector<absl::StatusOr<proto::BeginRunResponse>> answers(
        tables.size(), absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (size_t i = 0; i < tables.size(); ++i) {
      threads.emplace_back([this, i, &tables, &answers] {
        answers[i] = links_[i]->BeginRun(tables[i], "", std::nullopt, 2,
                                         100 + i, Soon());
      });
    }
    for (std::thread& t : threads) t.join();
    return answers;
  }

  // Link 2 stops (its daemon is killed); links 0 and 1 keep heartbeating
  // while the coordinator's clock passes its timeout, and the coordinator
  // is asked to look.
  // Its last heartbeat may still reach the coordinator after Stop() (a
  // cancelled call the server had begun): the clock runs until the group
  // re-formed, at most 30 s of it.
  void StopLink2UntilDropped() {
    links_[2]->Stop();
    for (int second = 0; second < 30; ++second) {
      clock_.Advance(absl::Seconds(1));
      for (int i = 0; i < 2; ++i) {
        ASSERT_TRUE(
            links_[i]->AwaitHeartbeats(links_[i]->heartbeats() + 1, Soon()));
      }
      coordinator_->DetectFailures();
      absl::StatusOr<proto::JobStatus> status = coordinator_->GetJobStatus({});
      ASSERT_OK(status.status());
      if (status->group_epoch() >= 2) return;
    }
    FAIL() << "the coordinator did not drop node 2";
  }

  // Polls the coordinator's status until `ready` or 20s.
  bool WaitForStatus(
      const std::function<bool(const proto::JobStatus&)>& ready) {
    const absl::Time give_up = Soon();
    while (absl::Now() < give_up) {
      absl::StatusOr<proto::JobStatus> status = coordinator_->GetJobStatus({});
      if (status.ok() && ready(*status)) return true;
      std::this_thread::yield();
    }
    return false;
  }

  // `schedule` is what the coordinator's planner hands `rank` from
  // `next_iteration` (StartCoordinator's options: 20 partitions per epoch).
  void ExpectPlannersSchedule(const proto::Schedule& schedule, int rank,
                              uint64_t next_iteration) {
    proto::GetScheduleRequest request;
    request.set_job_id(kJob);
    request.set_rank(rank);
    request.set_next_iteration(next_iteration);
    ASSERT_OK_AND_ASSIGN(const proto::Schedule expected,
                         coordinator_->GetSchedule(request));
    EXPECT_EQ(schedule.SerializeAsString(), expected.SerializeAsString())
        << schedule.DebugString() << " vs " << expected.DebugString();
    EXPECT_EQ(schedule.partitions_per_epoch(), 20u);
    EXPECT_EQ(schedule.first_iteration(), next_iteration);
  }

  proto::JobStatus Status() {
    absl::StatusOr<proto::JobStatus> status = coordinator_->GetJobStatus({});
    EXPECT_OK(status.status());
    return status.ok() ? *status : proto::JobStatus();
  }

  FakeClock clock_;
  int port_ = 0;
  absl::Duration heartbeat_interval_ = absl::Milliseconds(50);
  // The coordinator's: LOST members keep their ranks unless a test says.
  absl::Duration rejoin_grace_ = absl::Hours(1);
  int replicas_ = 1;
  absl::Duration join_timeout_ = absl::Seconds(20);
  std::vector<std::unique_ptr<metrics::MetricsRegistry>> registries_;
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::unique_ptr<coordinator::CoordinatorService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<std::unique_ptr<CoordinatorLink>> links_;
};

TEST_F(CoordinatorLinkTest, CreateRefusesMalformedAddressesNamingTheFlag) {
  for (const char* bad : {"127.0.0.1:99999", "not a host!!"}) {
    CoordinatorLinkOptions options = LinkOptions(0);
    options.coordinator = bad;
    EXPECT_THAT(CoordinatorLink::Create(options, {}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("--coordinator=", bad, ": "))))
        << bad;
  }
}

TEST_F(CoordinatorLinkTest, JoinWaitsForTheCoordinatorLoggingWhy) {
  port_ = coordinator::PickFreePort();  // nothing listens there yet
  absl::Mutex log_mu;
  std::vector<std::string> warnings;
  absl::Notification warned;
  SetLogSinkForTesting([&](LogSeverity severity, absl::string_view line) {
    if (severity != LogSeverity::kWarning) return;
    absl::MutexLock lock(&log_mu);
    warnings.emplace_back(line);
    if (!warned.HasBeenNotified()) warned.Notify();
  });
  CoordinatorLink* link = AddLink(0);
  ASSERT_NE(link, nullptr);
  absl::StatusOr<proto::JoinResponse> joined = absl::UnknownError("not run");
  std::thread joiner([&] { joined = link->Join(); });
  ASSERT_TRUE(warned.WaitForNotificationWithTimeout(absl::Seconds(20)));
  {
    absl::MutexLock lock(&log_mu);
    EXPECT_THAT(warnings[0],
                HasSubstr(absl::StrCat("joining job link-job at the "
                                       "coordinator 127.0.0.1:",
                                       port_, " failed, retrying: ")));
    EXPECT_THAT(warnings[0], HasSubstr("UNAVAILABLE"));
    EXPECT_THAT(warnings[0], HasSubstr("Connection refused"));
  }
  StartCoordinator(1);
  joiner.join();
  SetLogSinkForTesting(nullptr);
  ASSERT_OK(joined.status());
  EXPECT_EQ(joined->rank(), 0);
  // Heartbeats begin with the join.
  EXPECT_TRUE(link->AwaitHeartbeats(1, Soon()));
}

TEST_F(CoordinatorLinkTest, JoinGivesUpNamingTheAddressAndTheCause) {
  port_ = coordinator::PickFreePort();
  CoordinatorLinkOptions options = LinkOptions(0);
  options.join_timeout = absl::Milliseconds(300);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<CoordinatorLink> link,
                       CoordinatorLink::Create(options, {}));
  const absl::Status joined = link->Join().status();
  EXPECT_THAT(
      joined,
      StatusIs(absl::StatusCode::kUnavailable,
               HasSubstr(absl::StrCat(
                   "could not reach the coordinator at 127.0.0.1:", port_,
                   " within 300ms (joining job link-job): "
                   "UNAVAILABLE"))));
  // The cause as gRPC gave it: "Connection refused" on a quiet machine, or
  // the connection attempt cut short by the deadline.
  EXPECT_THAT(joined.message(), HasSubstr("failed to connect"));
}

TEST_F(CoordinatorLinkTest, JoinNamesAHostThatDoesNotResolve) {
  CoordinatorLinkOptions options = LinkOptions(0);
  options.coordinator = "no-such-host.invalid:29400";
  options.join_timeout = absl::Seconds(1);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<CoordinatorLink> link,
                       CoordinatorLink::Create(options, {}));
  EXPECT_THAT(link->Join(),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("could not reach the coordinator at "
                                 "no-such-host.invalid:29400 within 1s")));
}

TEST_F(CoordinatorLinkTest, HeartbeatsStartAtJoinAndShowTheNodesStatus) {
  StartCoordinator(2);
  for (int i = 0; i < 2; ++i) {
    AddLink(i);
    absl::MutexLock lock(&nodes_[i]->mu);
    nodes_[i]->iteration = 7 + i;
    proto::WorkerStatus worker;
    worker.set_index(1);
    worker.set_name("trainer-1");
    worker.set_state(proto::WorkerStatus::STATE_MISSING);
    worker.set_grace_left_seconds(25);
    nodes_[i]->workers.push_back(worker);
    nodes_[i]->run.set_state(proto::RunStatus::STATE_DECLARING);
  }
  const std::vector<proto::JoinResponse> joins = JoinAll(2);
  ASSERT_EQ(joins[0].group_size(), 2);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(links_[i]->AwaitHeartbeats(2, Soon()));
  }
  const proto::JobStatus status = Status();
  EXPECT_EQ(status.healthy_nodes(), 2);
  for (int rank = 0; rank < 2; ++rank) {
    const proto::NodeStatus& node = status.nodes(rank);
    EXPECT_EQ(node.last_iteration(), 7u + joins[rank].rank());
    ASSERT_THAT(node.workers(), SizeIs(1));
    EXPECT_EQ(node.workers(0).state(), proto::WorkerStatus::STATE_MISSING);
    EXPECT_EQ(node.run().state(), proto::RunStatus::STATE_DECLARING);
  }
}

TEST_F(CoordinatorLinkTest, EveryLinkBeginsTheSameRunThenEndsIt) {
  StartCoordinator(3);
  JoinAll(3);
  for (const auto& answer : BeginAll({Table(), Table(), Table()})) {
    ASSERT_OK(answer.status());
    EXPECT_EQ(answer->run_id(), 1u);
    EXPECT_EQ(answer->first_op_seq(), 103u);  // max(100..102) + 1
    EXPECT_EQ(answer->total_workers(), 6);
    EXPECT_EQ(answer->parameter_count(), 1010u);
  }
  for (int i = 0; i < 3; ++i) {
    proto::RunStatus run;
    run.set_run_id(1);
    run.set_state(proto::RunStatus::STATE_FINISHED);
    run.set_steps(20);
    links_[i]->EndRun(run);
  }
  ASSERT_TRUE(WaitForStatus([](const proto::JobStatus& s) {
    return s.recent_runs_size() == 1 &&
           s.recent_runs(0).state() == proto::RunStatus::STATE_FINISHED;
  }));
  EXPECT_EQ(Status().recent_runs(0).steps(), 20);

  // Differing tables: every link gets the same error naming both.
  const std::vector<proto::TensorSpec> other = Table(999);
  const auto answers = BeginAll({Table(), Table(), other});
  const int odd = links_[2]->join_response().rank();
  for (const auto& answer : answers) {
    EXPECT_THAT(
        answer,
        StatusIs(absl::StatusCode::kInvalidArgument,
                 odd == 0 ? HasSubstr("declared as [999] "
                                      "float32 by rank 0")
                          : HasSubstr(absl::StrCat("[1000] float32 by rank 0 "
                                                   "but as [999] float32 by "
                                                   "rank ",
                                                   odd))));
  }
}

TEST_F(CoordinatorLinkTest, ALoneBeginRunTimesOutNamingTheOthers) {
  StartCoordinator(2);
  JoinAll(2);
  const int other = links_[1]->join_response().rank();
  EXPECT_THAT(
      links_[0]->BeginRun(Table(), "", std::nullopt, 2, 0,
                          absl::Now() + absl::Milliseconds(500)),
      StatusIs(absl::StatusCode::kDeadlineExceeded,
               HasSubstr(absl::StrCat("rank ", other,
                                      " has not ended its declarations"))));
}

TEST_F(CoordinatorLinkTest, AFailedRunIsToldToTheOtherLinks) {
  StartCoordinator(3);
  JoinAll(3);
  for (const auto& answer : BeginAll({Table(), Table(), Table()})) {
    ASSERT_OK(answer.status());
  }
  for (auto& node : nodes_) node->SetRun(1, proto::RunStatus::STATE_RUNNING);
  const int failing_rank = links_[1]->join_response().rank();
  proto::RunStatus failed;
  failed.set_run_id(1);
  failed.set_state(proto::RunStatus::STATE_FAILED);
  failed.set_steps(7);
  failed.set_error("nan gradient in tensor 'w'");
  links_[1]->ReportStepFailure(7, "nan gradient in tensor 'w'");
  links_[1]->EndRun(failed, 7);
  for (int i : {0, 2}) {
    ASSERT_TRUE(nodes_[i]->Await(+[](Node* n) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return !n->failures.empty();
    })) << "link "
        << i;
    absl::MutexLock lock(&nodes_[i]->mu);
    ASSERT_THAT(nodes_[i]->failures, SizeIs(1));  // told once
    EXPECT_EQ(nodes_[i]->failures[0].run_id(), 1u);
    EXPECT_EQ(nodes_[i]->failures[0].rank(), failing_rank);
    EXPECT_EQ(nodes_[i]->failures[0].step(), 7);
    EXPECT_THAT(nodes_[i]->failures[0].error(),
                HasSubstr("step 7: nan gradient in tensor 'w'"));
  }
  const proto::JobStatus status = Status();
  EXPECT_THAT(status.last_error(), HasSubstr("nan gradient in tensor 'w'"));
  EXPECT_EQ(status.recent_runs(0).state(), proto::RunStatus::STATE_FAILED);
  EXPECT_EQ(status.nodes(failing_rank).last_error(),
            "nan gradient in tensor 'w'");
}

TEST_F(CoordinatorLinkTest, ARestartedCoordinatorLearnsTheRunningGroup) {
  StartCoordinator(3);
  const std::vector<proto::JoinResponse> joins = JoinAll(3);
  for (const auto& answer : BeginAll({Table(), Table(), Table()})) {
    ASSERT_OK(answer.status());
  }
  for (auto& node : nodes_) node->SetRun(1, proto::RunStatus::STATE_RUNNING, 5);
  ASSERT_TRUE(WaitForStatus(
      [](const proto::JobStatus& s) { return s.current_run().steps() == 5; }));

  // The coordinator goes away; a fresh one comes up on the same port.
  StopCoordinator();
  StartCoordinator(3);
  ASSERT_TRUE(WaitForStatus([](const proto::JobStatus& s) {
    return s.formed() && s.healthy_nodes() == 3;
  })) << Status().DebugString();
  const proto::JobStatus status = Status();
  EXPECT_EQ(status.group_size(), 3);
  EXPECT_EQ(status.group_epoch(), joins[0].group_epoch());
  EXPECT_FALSE(status.degraded());
  EXPECT_EQ(status.current_run().run_id(), 1u);
  for (int i = 0; i < 3; ++i) {
    // Each re-registered once (waited for, bounded: a heartbeat the old
    // coordinator answered as it shut down may still be counted after it
    // stopped, so a heartbeat count does not tell), and the new coordinator
    // then took its heartbeats.
    const absl::Time give_up = Soon();
    while (links_[i]->rejoins() < 1 && absl::Now() < give_up) {
      std::this_thread::yield();
    }
    ASSERT_TRUE(
        links_[i]->AwaitHeartbeats(links_[i]->heartbeats() + 1, Soon()));
    EXPECT_EQ(links_[i]->rejoins(), 1) << "link " << i;
    EXPECT_EQ(status.nodes(joins[i].rank()).peer().hostname(),
              absl::StrCat("node-", i));
  }
  // Training goes on: the next run is run 2.
  for (const auto& answer : BeginAll({Table(), Table(), Table()})) {
    ASSERT_OK(answer.status());
    EXPECT_EQ(answer->run_id(), 2u);
  }
}

TEST_F(CoordinatorLinkTest, BeginRunReRegistersWithARestartedCoordinator) {
  // One heartbeat at the join, then none for the test's length: only
  // BeginRun can find out that the coordinator restarted.
  heartbeat_interval_ = absl::Hours(1);
  StartCoordinator(2);
  JoinAll(2);
  for (auto& link : links_) ASSERT_TRUE(link->AwaitHeartbeats(1, Soon()));
  StopCoordinator();
  StartCoordinator(2);
  for (const auto& answer : BeginAll({Table(), Table()})) {
    ASSERT_OK(answer.status());
    EXPECT_EQ(answer->run_id(), 1u);
  }
  for (auto& link : links_) EXPECT_EQ(link->rejoins(), 1);
  EXPECT_EQ(Status().healthy_nodes(), 2);
}

TEST_F(CoordinatorLinkTest, ALostNodeThatHeartbeatsAgainIsHealthyAgain) {
  StartCoordinator(2);
  JoinAll(2);
  for (int i = 0; i < 2; ++i)
    ASSERT_TRUE(links_[i]->AwaitHeartbeats(1, Soon()));
  // Both fell silent as far as the coordinator's clock goes.
  clock_.Advance(absl::Seconds(6));
  // Marks both LOST, unless a heartbeat came first and marked the other
  // (either way the one that comes back first hears of the other).
  coordinator_->DetectFailures();
  // The next heartbeats make them healthy again; the first one to come
  // back learns that the other was lost.
  ASSERT_TRUE(WaitForStatus([](const proto::JobStatus& s) {
    return s.healthy_nodes() == 2 && !s.degraded();
  }));
  // The status can show both healthy a moment before the link thread has
  // handed the first answer to its callback: wait for it, bounded.
  bool told = false;
  const absl::Time deadline = Soon();
  while (!told && absl::Now() < deadline) {
    for (auto& node : nodes_) {
      absl::MutexLock lock(&node->mu);
      told |= !node->lost.empty();
    }
    if (!told) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(told);
}

// The coordinator re-forms without a silent node: the survivors' links
// learn their new ranks (on_regroup); the node, restarted, joins afresh and
// the group re-forms with it; each link then speaks for its new rank.
TEST_F(CoordinatorLinkTest, ReFormedGroupsAreAdoptedAndARestartedNodeTakenIn) {
  rejoin_grace_ = absl::ZeroDuration();
  StartCoordinator(3);
  std::vector<proto::JoinResponse> joined = JoinAll(3);
  StopLink2UntilDropped();
  if (HasFatalFailure()) return;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(nodes_[i]->Await(+[](Node* n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                                      n->mu) {
      return !n->groups.empty();
    })) << "node "
        << i << " was not told of the re-formed group";
    absl::MutexLock lock(&nodes_[i]->mu);
    const proto::JoinResponse& group = nodes_[i]->groups.back();
    EXPECT_EQ(group.group_epoch(), 2u);
    EXPECT_EQ(group.group_size(), 2);
    EXPECT_EQ(group.rank(), i);
    EXPECT_NE(group.group_key(), joined[i].group_key());
    EXPECT_THAT(group.reformed_because(),
                HasSubstr("rank 2 (node-2, 127.0.0.1:40002) of group epoch 1 "
                          "dropped"));
  }
  EXPECT_EQ(links_[0]->group_epoch(), 2u);

  // Node 2 restarts: its Join is taken in at once (no run is running).
  links_[2].reset();
  CoordinatorLink* back = AddLink(2);
  ASSERT_NE(back, nullptr);
  ASSERT_OK_AND_ASSIGN(proto::JoinResponse again, back->Join());
  EXPECT_EQ(again.group_epoch(), 3u);
  EXPECT_EQ(again.rank(), 2);
  EXPECT_EQ(again.group_size(), 3);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(nodes_[i]->Await(+[](Node* n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                                      n->mu) {
      return n->groups.size() == 2;
    })) << "node "
        << i << " was not told of the group that took node 2 in";
    absl::MutexLock lock(&nodes_[i]->mu);
    EXPECT_EQ(nodes_[i]->groups.back().group_epoch(), 3u);
    EXPECT_EQ(nodes_[i]->groups.back().group_key(), again.group_key());
  }
  // Everyone heartbeats in epoch 3: the group is whole.
  ASSERT_TRUE(WaitForStatus([](const proto::JobStatus& s) {
    return s.group_epoch() == 3 && s.healthy_nodes() == 3;
  }));
  // A schedule asked now is for the link's new rank.
  ASSERT_OK_AND_ASSIGN(proto::Schedule schedule,
                       links_[1]->GetSchedule(0, Soon()));
  ASSERT_GT(schedule.assignments_size(), 0);
  EXPECT_EQ(schedule.assignments(0).rank(), 1);
}

// A peer that vanished from the data plane is named to the coordinator by
// its rank in the group the link is in when it beats: a peer seen to go
// while the group re-forms is named in the new epoch, and an address that
// is no longer in the group (or this node's own) names no one.
TEST_F(CoordinatorLinkTest, AVanishedPeerIsNamedByItsRankInTheLinksGroup) {
  rejoin_grace_ = absl::ZeroDuration();
  StartCoordinator(3);
  JoinAll(3);
  StopLink2UntilDropped();
  if (HasFatalFailure()) return;
  ASSERT_TRUE(WaitForStatus([](const proto::JobStatus& s) {
    return s.group_epoch() == 2 && s.healthy_nodes() == 2;
  }));
  ASSERT_TRUE(nodes_[0]->Await(+[](Node* n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                                    n->mu) { return !n->groups.empty(); }));
  absl::Mutex log_mu;
  std::vector<std::string> warnings;
  SetLogSinkForTesting([&](LogSeverity severity, absl::string_view line) {
    if (severity != LogSeverity::kWarning) return;
    absl::MutexLock lock(&log_mu);
    warnings.emplace_back(line);
  });
  // Node 2 (gone), node 0 itself and node 1 (rank 1 of epoch 2).
  links_[0]->ReportVanishedPeer("127.0.0.1:40002");
  links_[0]->ReportVanishedPeer("127.0.0.1:40000");
  links_[0]->ReportVanishedPeer("127.0.0.1:40001");
  const auto suspected = [&] {
    absl::MutexLock lock(&log_mu);
    return std::count_if(
        warnings.begin(), warnings.end(), [](const std::string& line) {
          return line.find("vanished from the data plane of") !=
                 std::string::npos;
        });
  };
  const absl::Time give_up = Soon();
  while (suspected() == 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  // The beat that carried them has been answered: nothing else comes.
  ASSERT_TRUE(links_[0]->AwaitHeartbeats(links_[0]->heartbeats() + 2, Soon()));
  SetLogSinkForTesting(nullptr);
  absl::MutexLock lock(&log_mu);
  std::vector<std::string> named;
  for (const std::string& line : warnings) {
    if (line.find("vanished from the data plane of") != std::string::npos) {
      named.push_back(line);
    }
  }
  ASSERT_EQ(named.size(), 1u) << absl::StrJoin(named, "\n");
  EXPECT_THAT(named[0],
              HasSubstr("rank 1 (node-1, 127.0.0.1:40001) vanished from the "
                        "data plane of rank 0 (node-0, 127.0.0.1:40000)"));
}

// A node restarted while the group of the others runs a run that cannot
// go on with it (no replicas) is taken in when the run ends, however long
// after its own join timeout: it asks again.
TEST_F(CoordinatorLinkTest, ALateJoinWaitsForTheRunPastItsOwnTimeout) {
  rejoin_grace_ = absl::ZeroDuration();
  replicas_ = 0;
  StartCoordinator(3);
  JoinAll(3);
  StopLink2UntilDropped();
  if (HasFatalFailure()) return;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(nodes_[i]->Await(+[](Node* n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                                      n->mu) { return !n->groups.empty(); }));
  }
  // The two begin run 1 of epoch 2.
  const auto begun = BeginAll({Table(), Table()});
  for (const auto& answer : begun) ASSERT_OK(answer.status());
  const uint64_t run = begun[0]->run_id();
  // Node 2 comes back with a join timeout far shorter than the run.
  join_timeout_ = absl::Milliseconds(300);
  links_[2].reset();
  CoordinatorLink* back = AddLink(2);
  ASSERT_NE(back, nullptr);
  absl::StatusOr<proto::JoinResponse> joined;
  absl::Notification done;
  std::thread joiner([&] {
    joined = back->Join();
    done.Notify();
  });
  // Several of its timeouts pass: it still waits, listed as joining.
  EXPECT_FALSE(done.WaitForNotificationWithTimeout(absl::Seconds(1)));
  ASSERT_TRUE(WaitForStatus([](const proto::JobStatus& s) {
    return s.nodes_size() == 3 && s.nodes(2).peer().rank() == -1;
  }));
  // The run ends on both: the node is taken in.
  for (int i = 0; i < 2; ++i) {
    proto::RunStatus ended;
    ended.set_run_id(run);
    ended.set_state(proto::RunStatus::STATE_FINISHED);
    ended.set_steps(10);
    links_[i]->EndRun(ended);
  }
  joiner.join();
  ASSERT_OK(joined.status());
  EXPECT_EQ(joined->group_epoch(), 3u);
  EXPECT_EQ(joined->group_size(), 3);
}

TEST_F(CoordinatorLinkTest, GetScheduleReturnsThePlannersScheduleForThisRank) {
  StartCoordinator(2);
  const std::vector<proto::JoinResponse> joins = JoinAll(2);
  for (int i = 0; i < 2; ++i) {
    for (uint64_t next : {0, 4, 8}) {
      ASSERT_OK_AND_ASSIGN(const proto::Schedule schedule,
                           links_[i]->GetSchedule(next, Soon()));
      EXPECT_EQ(schedule.iteration_count(), next == 8 ? 2 : 4);
      EXPECT_EQ(schedule.done(), next == 8);
      ExpectPlannersSchedule(schedule, joins[i].rank(), next);
      for (const proto::ScheduledIteration& it : schedule.iterations()) {
        for (const proto::PartitionAssignment& a : it.assignments()) {
          EXPECT_EQ(a.rank(), joins[i].rank());
        }
      }
    }
  }
}

TEST_F(CoordinatorLinkTest, GetScheduleBeforeJoinIsAFailedPrecondition) {
  StartCoordinator(1);
  CoordinatorLink* link = AddLink(0);
  ASSERT_NE(link, nullptr);
  EXPECT_THAT(link->GetSchedule(0, Soon()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr(absl::StrCat("127.0.0.1:", port_))));
}

TEST_F(CoordinatorLinkTest, GetScheduleReRegistersWithARestartedCoordinator) {
  // No heartbeat after the join's first: only GetSchedule can find out
  // that the coordinator restarted.
  heartbeat_interval_ = absl::Hours(1);
  StartCoordinator(1);
  const std::vector<proto::JoinResponse> joins = JoinAll(1);
  ASSERT_TRUE(links_[0]->AwaitHeartbeats(1, Soon()));
  StopCoordinator();
  // Asked while the coordinator is away: retried until it is back.
  absl::StatusOr<proto::Schedule> schedule = absl::UnknownError("not run");
  std::thread asker([&] { schedule = links_[0]->GetSchedule(4, Soon()); });
  absl::SleepFor(absl::Milliseconds(300));
  StartCoordinator(1);
  asker.join();
  ASSERT_OK(schedule.status());
  ExpectPlannersSchedule(*schedule, joins[0].rank(), 4);
  EXPECT_EQ(links_[0]->rejoins(), 1);
}

TEST_F(CoordinatorLinkTest, GetScheduleGivesUpAtItsDeadlineNamingTheAddress) {
  heartbeat_interval_ = absl::Hours(1);
  StartCoordinator(1);
  JoinAll(1);
  StopCoordinator();
  const std::string address = absl::StrCat("127.0.0.1:", port_);
  const absl::Time start = absl::Now();
  const absl::Status status =
      links_[0]->GetSchedule(0, start + absl::Milliseconds(500)).status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_THAT(status,
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr(absl::StrCat("the coordinator at ", address,
                                              " did not answer the schedule "
                                              "request of rank 0 from "
                                              "iteration 0 within "))));
}

TEST_F(CoordinatorLinkTest, StopCancelsABlockedBeginRun) {
  StartCoordinator(2);
  JoinAll(2);
  absl::StatusOr<proto::BeginRunResponse> waiting = absl::UnknownError("");
  std::thread blocked([&] {
    waiting = links_[0]->BeginRun(Table(), "", std::nullopt, 2, 0, Soon());
  });
  ASSERT_TRUE(WaitForStatus([](const proto::JobStatus& s) {
    return s.current_run().state() == proto::RunStatus::STATE_DECLARING;
  }));
  const absl::Time start = absl::Now();
  links_[0]->Stop();
  blocked.join();
  EXPECT_THAT(waiting, StatusIs(absl::StatusCode::kCancelled));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace node
}  // namespace starling
