#include "server/node/telemetry/collective_monitor.h"

#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/collective/communicator.h"
#include "server/metrics/metrics_registry.h"
#include "server/metrics/text_format.h"
#include "server/transport/loopback/loopback_transport.h"

namespace starling {
namespace node {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kRanks = 3;

// Three ranks on a loopback fabric, each with its own registry, monitor and
// Communicator, as three daemons would have.
class CollectiveMonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int r = 0; r < kRanks; ++r) {
      registries_.push_back(std::make_unique<metrics::MetricsRegistry>());
      ASSERT_OK_AND_ASSIGN(std::shared_ptr<CollectiveMonitor> monitor,
                           CollectiveMonitor::Create(registries_[r].get()));
      monitor->SetGroup(r, kRanks);
      monitors_.push_back(monitor);
      collective::CommunicatorOptions options;
      options.observer = monitor.get();
      options.timeout = absl::Seconds(30);
      ASSERT_OK_AND_ASSIGN(
          std::unique_ptr<collective::Communicator> comm,
          collective::Communicator::Create(fabric_.endpoint(r), options));
      comms_.push_back(std::move(comm));
    }
  }

  // Rank `r` all-reduces `floats` floats (value r + 1) on its own thread.
  std::thread AllReduceOn(int r, size_t floats, absl::Status* status) {
    return std::thread([this, r, floats, status] {
      std::vector<float> data(floats, static_cast<float>(r + 1));
      *status = comms_[r]->AllReduce(
          absl::MakeSpan(reinterpret_cast<std::byte*>(data.data()),
                         data.size() * sizeof(float)),
          collective::DataType::kFloat32, collective::ReduceOp::kSum);
      if (status->ok() && data[0] != 6.0f) {
        *status = absl::InternalError("wrong sum");
      }
    });
  }

  // Waits (with a deadline) until rank `r`'s monitor shows one op in flight
  // that has heard from every rank but `missing`.
  proto::CollectiveOp WaitForInFlight(int r, int missing) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      proto::CollectivesReply reply = monitors_[r]->Snapshot(absl::Now());
      // Old enough (10 times OpContext::kArrivalPollInterval, 5 ms) that
      // this rank's first wait slice has ended, so it has told the missing
      // rank that it waits (OpContext::StartWaiting): the late rank's
      // answer, sent as it starts, is what names it last on a rank that
      // exchanges no data with it. A younger op may not have told it yet.
      if (reply.in_flight_size() == 1 && reply.in_flight(0).seconds() >= 0.05 &&
          reply.in_flight(0).missing_ranks_size() == 1 &&
          reply.in_flight(0).missing_ranks(0) == missing &&
          reply.in_flight(0).arrived_ranks_size() == kRanks - 1) {
        return reply.in_flight(0);
      }
      absl::SleepFor(absl::Milliseconds(2));  // polling, with a deadline
    }
    ADD_FAILURE() << "rank " << r << " never showed rank " << missing
                  << " missing; last: "
                  << monitors_[r]->Snapshot(absl::Now()).DebugString();
    return proto::CollectiveOp();
  }

  std::string Scrape(int r) {
    return metrics::EncodeTextFormat(registries_[r]->Collect());
  }

  transport::loopback::LoopbackFabric fabric_{kRanks};
  std::vector<std::unique_ptr<metrics::MetricsRegistry>> registries_;
  std::vector<std::shared_ptr<CollectiveMonitor>> monitors_;
  std::vector<std::unique_ptr<collective::Communicator>> comms_;
};

TEST_F(CollectiveMonitorTest, NamesTheRankThatHasNotArrivedThenTheStraggler) {
  constexpr size_t kFloats = 1000;  // 4000 bytes: the 0-4KiB bucket
  absl::Status s0, s1, s2;
  std::thread t0 = AllReduceOn(0, kFloats, &s0);
  std::thread t1 = AllReduceOn(1, kFloats, &s1);
  // Ranks 0 and 1 wait for rank 2, and say so while they wait.
  for (int r : {0, 1}) {
    const proto::CollectiveOp op = WaitForInFlight(r, /*missing=*/2);
    EXPECT_EQ(op.seq(), 0u);
    EXPECT_EQ(op.op(), "allreduce");
    EXPECT_EQ(op.dtype(), "float32");
    EXPECT_EQ(op.count(), kFloats);
    EXPECT_EQ(op.bytes(), kFloats * 4);
    EXPECT_THAT(op.fingerprint(), HasSubstr("allreduce of 1000 float32"));
    EXPECT_THAT(op.arrived_ranks(), ElementsAre(0, 1));
    EXPECT_GE(op.seconds(), 0);
  }
  EXPECT_THAT(Scrape(0), HasSubstr("starling_collective_in_flight 1\n"));
  EXPECT_THAT(Scrape(0), HasSubstr("starling_collective_missing_ranks 1\n"));

  std::thread t2 = AllReduceOn(2, kFloats, &s2);
  t0.join();
  t1.join();
  t2.join();
  ASSERT_OK(s0);
  ASSERT_OK(s1);
  ASSERT_OK(s2);

  for (int r = 0; r < kRanks; ++r) {
    const proto::CollectivesReply reply = monitors_[r]->Snapshot(absl::Now());
    EXPECT_EQ(reply.in_flight_size(), 0);
    ASSERT_EQ(reply.recent_size(), 1);
    const proto::CollectiveOp& ended = reply.recent(0);
    EXPECT_EQ(ended.error(), "");
    EXPECT_THAT(ended.missing_ranks(), ElementsAre());
    // Rank 2 came last as every rank saw it: ranks 0 and 1 waited for it;
    // rank 2 found both descriptors waiting.
    EXPECT_EQ(ended.last_rank(), 2) << "on rank " << r;
    if (r == 2) {
      EXPECT_EQ(ended.skew_seconds(), 0);
    } else {
      EXPECT_GT(ended.skew_seconds(), 0);
    }
    const std::string text = Scrape(r);
    EXPECT_THAT(text, HasSubstr("starling_collective_in_flight 0\n"));
    EXPECT_THAT(text,
                HasSubstr("starling_collective_last_arrivals_total{rank=\"2\"} "
                          "1\n"));
    const std::string labels =
        absl::StrCat("{op=\"allreduce\",algorithm=\"", ended.algorithm(),
                     "\",size_bucket=\"0-4KiB\"}");
    EXPECT_THAT(text, HasSubstr(absl::StrCat("starling_collective_bytes_total",
                                             labels, " 4000\n")));
    // nccl-tests' all-reduce bus factor 2(n-1)/n = 4/3.
    EXPECT_THAT(text,
                HasSubstr(absl::StrCat("starling_collective_bus_bytes_total",
                                       labels, " 5333.33")));
    EXPECT_THAT(text,
                HasSubstr(absl::StrCat("starling_collective_duration_seconds_"
                                       "count",
                                       labels, " 1\n")));
  }
}

TEST_F(CollectiveMonitorTest, AFailedOpIsCountedAndKeepsItsError) {
  fabric_.KillRankForTesting(2);
  absl::Status s0, s1;
  std::thread t0 = AllReduceOn(0, 10, &s0);
  std::thread t1 = AllReduceOn(1, 10, &s1);
  t0.join();
  t1.join();
  EXPECT_FALSE(s0.ok());
  const proto::CollectivesReply reply = monitors_[0]->Snapshot(absl::Now());
  ASSERT_EQ(reply.recent_size(), 1);
  EXPECT_THAT(reply.recent(0).error(), HasSubstr("rank 2"));
  EXPECT_EQ(reply.recent(0).last_rank(), -1);
  EXPECT_THAT(Scrape(0), HasSubstr("starling_collective_failures_total{op="
                                   "\"allreduce\"} 1\n"));
}

TEST(CollectiveMonitor, SizeBucketsAndBusFactors) {
  EXPECT_STREQ(CollectiveMonitor::SizeBucket(0), "0-4KiB");
  EXPECT_STREQ(CollectiveMonitor::SizeBucket(4096), "0-4KiB");
  EXPECT_STREQ(CollectiveMonitor::SizeBucket(4097), "4-64KiB");
  EXPECT_STREQ(CollectiveMonitor::SizeBucket(1 << 20), "64KiB-1MiB");
  EXPECT_STREQ(CollectiveMonitor::SizeBucket(40 << 20), "16-256MiB");
  EXPECT_STREQ(CollectiveMonitor::SizeBucket(uint64_t{1} << 30), "256MiB+");
  using collective::OpKind;
  EXPECT_DOUBLE_EQ(CollectiveMonitor::BusFactor(OpKind::kAllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(CollectiveMonitor::BusFactor(OpKind::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(CollectiveMonitor::BusFactor(OpKind::kBroadcast, 4), 1);
  EXPECT_DOUBLE_EQ(CollectiveMonitor::BusFactor(OpKind::kAllReduce, 1), 0);
}

}  // namespace
}  // namespace node
}  // namespace starling
