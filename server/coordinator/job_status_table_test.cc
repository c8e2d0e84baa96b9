#include "server/coordinator/job_status_table.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace starling {
namespace coordinator {
namespace {

TEST(JobStatusTable, FormatsBytesInBinaryUnits) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(4u << 20), "4.0 MiB");
  EXPECT_EQ(FormatBytes(3ull << 40), "3.0 TiB");
}

TEST(JobStatusTable, PrintsOneRowPerRankThenTheJob) {
  proto::JobStatus status;
  status.set_job_id("demo");
  status.set_formed(true);
  status.set_group_size(2);
  status.set_healthy_nodes(1);
  status.set_group_epoch(1);
  status.set_degraded(true);
  status.set_epoch(1);
  status.set_epochs(3);
  status.set_iteration(20);
  status.set_iterations_per_epoch(16);
  status.set_last_error("rank 1 (node-b, 10.0.0.2:29500) lost");
  const char* hosts[] = {"node-a", "node-b"};
  for (int rank = 0; rank < 2; ++rank) {
    proto::NodeStatus* node = status.add_nodes();
    node->mutable_peer()->set_rank(rank);
    node->mutable_peer()->set_hostname(hosts[rank]);
    node->mutable_peer()->set_data_address(
        absl::StrCat("10.0.0.", rank + 1, ":29500"));
    node->mutable_peer()->set_health(rank == 0 ? proto::NODE_HEALTH_HEALTHY
                                               : proto::NODE_HEALTH_LOST);
    node->set_shard_bytes(2048);
    node->set_optimizer_state_bytes(4096);
    node->set_heartbeat_age_seconds(rank == 0 ? 0.25 : 6);
  }
  status.mutable_nodes(1)->set_last_error("collective\ntimeout");
  // Rank 1 reported no transport (an older daemon, or its plane not formed
  // yet): "-".
  status.mutable_nodes(0)->set_transport("fabric (verbs;ofi_rxm) to 1 peer");
  EXPECT_EQ(FormatJobStatusTable(status),
            "job demo: 1 of 2 nodes healthy, group epoch 1\n"
            "RANK  HOSTNAME  ADDRESS         HEALTH   SHARD    OPT STATE  "
            "HEARTBEAT  TRANSPORT                         LAST ERROR\n"
            "0     node-a    10.0.0.1:29500  HEALTHY  2.0 KiB  4.0 KiB    "
            "0.2s ago   fabric (verbs;ofi_rxm) to 1 peer  -\n"
            "1     node-b    10.0.0.2:29500  LOST     2.0 KiB  4.0 KiB    "
            "6.0s ago   -                                 collective timeout\n"
            "epoch 1 of 3, iteration 20 (16 per epoch); degraded: yes\n"
            "last error: rank 1 (node-b, 10.0.0.2:29500) lost\n");
}

TEST(JobStatusTable, SaysWhenAndWhyTheGroupReFormed) {
  proto::JobStatus status;
  status.set_job_id("demo");
  status.set_formed(true);
  status.set_group_size(1);
  status.set_healthy_nodes(1);
  status.set_group_epoch(2);
  status.set_epochs(1);
  status.set_iterations_per_epoch(16);
  status.set_status_unix_seconds(1000);
  status.set_reformed_unix_seconds(987.5);
  status.set_reformed_because(
      "rank 1 (node-b, 10.0.0.2:29500) of group epoch 1 dropped: no "
      "heartbeat for 5.2s (timeout 5s)");
  EXPECT_THAT(
      FormatJobStatusTable(status),
      testing::HasSubstr("group epoch 2 re-formed 12.5s ago: rank 1 (node-b, "
                         "10.0.0.2:29500) of group epoch 1 dropped: no "
                         "heartbeat for 5.2s (timeout 5s)\n"));
}

TEST(JobStatusTable, ShowsEachNodesWorkersAndTheRuns) {
  proto::JobStatus status;
  status.set_job_id("demo");
  status.set_formed(true);
  status.set_group_size(2);
  status.set_healthy_nodes(2);
  status.set_group_epoch(1);
  status.set_epochs(1);
  status.set_iterations_per_epoch(16);
  status.set_status_unix_seconds(1000);
  for (int rank = 0; rank < 2; ++rank) {
    proto::NodeStatus* node = status.add_nodes();
    node->mutable_peer()->set_rank(rank);
    node->mutable_peer()->set_hostname(rank == 0 ? "node-a" : "node-b");
    node->mutable_peer()->set_data_address("10.0.0.1:29500");
    node->mutable_peer()->set_health(proto::NODE_HEALTH_HEALTHY);
  }
  proto::NodeStatus* a = status.mutable_nodes(0);
  a->mutable_run()->set_run_id(3);
  a->mutable_run()->set_state(proto::RunStatus::STATE_RUNNING);
  a->mutable_run()->set_steps(12);
  proto::WorkerStatus* w0 = a->add_workers();
  w0->set_index(0);
  w0->set_name("trainer-0");
  w0->set_state(proto::WorkerStatus::STATE_ATTACHED);
  w0->set_next_step(12);
  w0->set_pid(4242);
  proto::WorkerStatus* w1 = a->add_workers();
  w1->set_index(1);
  w1->set_name("trainer-1");
  w1->set_state(proto::WorkerStatus::STATE_MISSING);
  w1->set_next_step(11);
  w1->set_missing_seconds(3);
  w1->set_grace_left_seconds(27);
  proto::RunStatus* current = status.mutable_current_run();
  current->set_run_id(3);
  current->set_state(proto::RunStatus::STATE_RUNNING);
  current->set_steps(12);
  current->set_total_workers(4);
  current->set_parameter_count(1010);
  current->set_started_unix_seconds(988);
  proto::RunStatus* failed = status.add_recent_runs();
  failed->set_run_id(2);
  failed->set_state(proto::RunStatus::STATE_FAILED);
  failed->set_steps(7);
  failed->set_total_workers(4);
  failed->set_parameter_count(1010);
  failed->set_started_unix_seconds(900);
  failed->set_ended_unix_seconds(905.5);
  failed->set_error("rank 1 (node-b, 10.0.0.2:29500) step 7: nan\ngradient");
  proto::RunStatus* finished = status.add_recent_runs();
  finished->set_run_id(1);
  finished->set_state(proto::RunStatus::STATE_FINISHED);
  finished->set_steps(500);
  status.set_last_error(failed->error());

  const std::string table = FormatJobStatusTable(status);
  EXPECT_THAT(table,
              testing::HasSubstr(
                  "workers:\n"
                  "  rank 0 (node-a): run 3 RUNNING, 12 steps, 2 workers\n"
                  "    0  trainer-0  ATTACHED  next step 12  pid 4242\n"
                  "    1  trainer-1  MISSING   next step 11  gone 3.0s, "
                  "grace left 27.0s\n"
                  "epoch 0 of 1"));
  EXPECT_THAT(table, testing::Not(testing::HasSubstr("rank 1 (node-b):")));
  EXPECT_THAT(table,
              testing::EndsWith(
                  "runs:\n"
                  "  current: run 3 RUNNING, 12 steps, 4 workers, 1010 "
                  "parameters, for 12.0s\n"
                  "  run 2 FAILED after 7 steps (4 workers, 1010 parameters, "
                  "5.5s): rank 1 (node-b, 10.0.0.2:29500) step 7: nan "
                  "gradient\n"
                  "  run 1 FINISHED after 500 steps\n"
                  "last error: rank 1 (node-b, 10.0.0.2:29500) step 7: nan "
                  "gradient\n"));
}

TEST(JobStatusTable, ShowsWaitingNodesBeforeTheGroupForms) {
  proto::JobStatus status;
  status.set_job_id("demo");
  status.set_expected_nodes(4);
  proto::NodeStatus* node = status.add_nodes();
  node->mutable_peer()->set_rank(-1);
  node->mutable_peer()->set_hostname("node-a");
  node->mutable_peer()->set_data_address("10.0.0.1:29500");
  node->mutable_peer()->set_health(proto::NODE_HEALTH_JOINING);
  const std::string table = FormatJobStatusTable(status);
  EXPECT_THAT(
      table, testing::StartsWith("job demo: group not formed yet, 1 of 4 nodes "
                                 "joined\n"));
  EXPECT_THAT(table, testing::HasSubstr("-     node-a    10.0.0.1:29500  "
                                        "JOINING"));
}

}  // namespace
}  // namespace coordinator
}  // namespace starling
