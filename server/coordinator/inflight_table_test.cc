#include "server/coordinator/inflight_table.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace starling {
namespace coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kNow = 1'800'000'000'000'000;  // Unix microseconds

proto::CollectiveOp Op(uint64_t seq, double seconds, std::vector<int> arrived,
                       std::vector<int> missing) {
  proto::CollectiveOp op;
  op.set_seq(seq);
  op.set_op("allreduce");
  op.set_fingerprint("allreduce of 1000 float32 (sum, butterfly)");
  op.set_seconds(seconds);
  op.set_start_unix_micros(kNow - static_cast<int64_t>(seconds * 1e6));
  for (int r : arrived) op.add_arrived_ranks(r);
  for (int r : missing) op.add_missing_ranks(r);
  op.set_last_rank(-1);
  return op;
}

NodeCollectives Node(int rank, proto::CollectivesReply reply) {
  NodeCollectives n;
  n.rank = rank;
  n.hostname = absl::StrCat("node", rank);
  n.admin_address = absl::StrCat("10.0.0.", rank, ":29600");
  reply.set_rank(rank);
  reply.set_group_size(4);
  reply.set_now_unix_micros(kNow);
  n.reply = std::move(reply);
  return n;
}

proto::JobStatus Job() {
  proto::JobStatus job;
  job.set_job_id("mnist");
  job.set_group_size(4);
  job.set_healthy_nodes(4);
  return job;
}

TEST(InFlightTable, NamesTheRankEveryoneWaitsForAndWhatItDoes) {
  std::vector<NodeCollectives> nodes;
  for (int r : {0, 1, 3}) {
    proto::CollectivesReply reply;
    *reply.add_in_flight() = Op(1234, 12.3, {0, 1, 3}, {2});
    nodes.push_back(Node(r, reply));
  }
  proto::CollectivesReply idle;
  proto::CollectiveOp last = Op(1233, 0.002, {0, 1, 2, 3}, {});
  last.set_start_unix_micros(kNow - 12'400'000);
  last.set_last_rank(2);
  *idle.add_recent() = last;
  proto::LocalWorkerRound* hung = idle.mutable_local()->add_workers();
  hung->mutable_worker()->set_index(0);
  hung->mutable_worker()->set_name("train.py");
  hung->mutable_worker()->set_pid(4242);
  hung->mutable_worker()->set_state(proto::WorkerStatus::STATE_ATTACHED);
  proto::LocalWorkerRound* ready = idle.mutable_local()->add_workers();
  ready->mutable_worker()->set_index(1);
  ready->mutable_worker()->set_name("train.py");
  ready->mutable_worker()->set_pid(4243);
  ready->mutable_worker()->set_state(proto::WorkerStatus::STATE_ATTACHED);
  ready->set_queued(1);
  ready->set_oldest_queued("step 58");
  ready->set_oldest_queued_seconds(12.2);
  idle.mutable_local()->set_last_round("step 57");
  idle.mutable_local()->set_last_round_ended_seconds(12.4);
  nodes.insert(nodes.begin() + 2, Node(2, idle));

  const std::string text = FormatInFlightTable(Job(), nodes);
  EXPECT_THAT(text, HasSubstr("job mnist: group of 4, 4 healthy"));
  EXPECT_THAT(
      text, HasSubstr("allreduce op 1234 (allreduce of 1000 float32 (sum, "
                      "butterfly)) in flight for 12.3 s, waiting for rank 2"));
  EXPECT_THAT(text, HasSubstr("- (last: allreduce op 1233"));
  EXPECT_THAT(text, HasSubstr("who is missing:\n  allreduce op 1234 (allreduce "
                              "of 1000 float32 (sum, butterfly)) waits for "
                              "rank 2 (ranks 0, 1, 3 in it for up to 12.3 s)"));
  EXPECT_THAT(text, HasSubstr("rank 2 (node2) is in no collective; its last "
                              "was op 1233, ended 12.4 s ago"));
  // And why: its local worker 0 sent nothing since the last round, while
  // worker 1 waits with step 58.
  EXPECT_THAT(text,
              HasSubstr("it waits for its local worker 0 'train.py' (pid "
                        "4242), which sent nothing since its last round (step "
                        "57) ended 12.4 s ago (worker 1 'train.py' (pid 4243) "
                        "sent step 58 12.2 s ago)"));
}

TEST(InFlightTable, AnUnreachableDaemonIsShownWithItsAddress) {
  std::vector<NodeCollectives> nodes;
  proto::CollectivesReply waiting;
  *waiting.add_in_flight() = Op(7, 3.0, {0}, {1});
  nodes.push_back(Node(0, waiting));
  NodeCollectives dead = Node(1, proto::CollectivesReply());
  dead.reply = absl::UnavailableError("connection refused");
  nodes.push_back(dead);
  const std::string text = FormatInFlightTable(Job(), nodes);
  EXPECT_THAT(text, HasSubstr("UNREACHABLE: 10.0.0.1:29600: connection "
                              "refused"));
  EXPECT_THAT(text, HasSubstr("rank 1 (node1) its admin service at "
                              "10.0.0.1:29600 did not answer"));
}

TEST(InFlightTable, SaysSoWhenNothingWaits) {
  std::vector<NodeCollectives> nodes = {Node(0, proto::CollectivesReply())};
  const std::string text = FormatInFlightTable(Job(), nodes);
  EXPECT_THAT(text, HasSubstr("no collective yet"));
  EXPECT_THAT(text, HasSubstr("no collective is waiting for anyone"));
  EXPECT_THAT(text, Not(HasSubstr("who is missing")));
}

}  // namespace
}  // namespace coordinator
}  // namespace starling
