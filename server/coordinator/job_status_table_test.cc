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
  EXPECT_EQ(FormatJobStatusTable(status),
            "job demo: 1 of 2 nodes healthy, group epoch 1\n"
            "RANK  HOSTNAME  ADDRESS         HEALTH   SHARD    OPT STATE  "
            "HEARTBEAT  LAST ERROR\n"
            "0     node-a    10.0.0.1:29500  HEALTHY  2.0 KiB  4.0 KiB    "
            "0.2s ago   -\n"
            "1     node-b    10.0.0.2:29500  LOST     2.0 KiB  4.0 KiB    "
            "6.0s ago   collective timeout\n"
            "epoch 1 of 3, iteration 20 (16 per epoch); degraded: yes\n"
            "last error: rank 1 (node-b, 10.0.0.2:29500) lost\n");
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
