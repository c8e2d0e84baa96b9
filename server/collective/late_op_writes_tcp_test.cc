// Late writes for ops that are gone, over the real TCP transport on
// 127.0.0.1 (CommunicatorOptions::retire_stale_regions): when rank 0 has
// cancelled an all-reduce, or skipped it with SkipTo(), the peers' writes for
// it arrive afterwards and are dropped and counted by rank 0's transport,
// never held. Rank 0's early-write room is made smaller than those writes,
// so holding them would pause the connections and the next op would time
// out; instead the next op, and an op after SkipTo(), give the exact sum.
//
// Ordering without sleeps: rank 0 ends (or skips) the op before it lets the
// peers run it, so every one of their writes for it arrives after the
// retirement. Their ops are cancelled before they start, which ends them at
// their first wait for rank 0, after they have posted everything (the
// reduce-broadcast's non-root ranks post their whole vector to rank 0 first).
// The next op is a reduce-broadcast too, so rank 0 receives a write from
// every peer in it; a transport publishes a peer's writes in post order, so
// by then every earlier write of theirs has been dropped and counted.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/collective/cancellation.h"
#include "server/collective/chunk_planner.h"
#include "server/collective/collective_test_util.h"
#include "server/collective/communicator.h"
#include "server/collective/op_context.h"
#include "server/transport/tcp/tcp_test_util.h"
#include "server/transport/tcp/tcp_transport.h"
#include "server/transport/transport.h"

namespace starling {
namespace collective {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int kRanks = 3;
// 1 MiB per rank: more than rank 0's early-write room.
constexpr size_t kCount = size_t{1} << 18;
constexpr size_t kChunkBytes = 256 * 1024;
constexpr size_t kRank0EarlyBytes = 64 * 1024;
// Bounds every wait of the test; a paused connection shows as this timeout.
constexpr absl::Duration kTimeout = absl::Seconds(20);

struct Group {
  std::vector<std::unique_ptr<transport::tcp::TcpTransport>> tcp;
  std::vector<transport::Transport*> raw;
};

absl::StatusOr<Group> FormGroup() {
  Group group;
  auto tcp = transport::tcp::CreateGroup(
      kRanks, [](transport::tcp::TcpOptions& options) {
        if (options.rank == 0) options.max_early_bytes = kRank0EarlyBytes;
        // Two parts per chunk: a dropped write still counts once.
        options.sockets_per_peer = 2;
        options.stripe_min_bytes = 64 * 1024;
      });
  if (!tcp.ok()) return tcp.status();
  group.tcp = std::move(*tcp);
  for (const auto& t : group.tcp) group.raw.push_back(t.get());
  return group;
}

CommunicatorOptions Options() {
  CommunicatorOptions options;
  options.timeout = kTimeout;
  options.chunk_bytes = kChunkBytes;
  options.retire_stale_regions = true;
  return options;
}

// Element i of rank r's input for the op tagged `salt`: an integer in
// [-1000, 1000], so every sum of kRanks of them is exact in float32.
float Input(int rank, size_t i, uint64_t salt) {
  const uint64_t mix =
      i * 7919 + static_cast<uint64_t>(rank) * 104729 + salt * 15485863;
  return static_cast<float>(static_cast<int64_t>(mix % 2001) - 1000);
}

// Runs an all-reduce (sum) of kCount float32 on `comm` and checks every
// element against the fp64 sum of all ranks' inputs, exactly.
absl::Status AllReduceIsExact(Communicator* comm, uint64_t salt,
                              Algorithm algorithm) {
  const int rank = comm->rank();
  std::vector<float> data(kCount);
  for (size_t i = 0; i < kCount; ++i) data[i] = Input(rank, i, salt);
  CallOptions call;
  call.algorithm = algorithm;
  const uint64_t seq = comm->next_op_seq();
  absl::Status s =
      comm->AllReduce(absl::MakeSpan(reinterpret_cast<std::byte*>(data.data()),
                                     data.size() * sizeof(float)),
                      DataType::kFloat32, ReduceOp::kSum, call);
  if (!s.ok()) return s;
  for (size_t i = 0; i < kCount; ++i) {
    double expected = 0;
    for (int r = 0; r < comm->size(); ++r) expected += Input(r, i, salt);
    if (static_cast<double>(data[i]) != expected) {
      return absl::InternalError(absl::StrCat("op ", seq, " element ", i,
                                              " is ", data[i], ", expected ",
                                              expected));
    }
  }
  return absl::OkStatus();
}

// An all-reduce of the test's size that is cancelled before it starts: it
// posts what it posts before its first wait, then fails at that wait.
absl::Status CancelledAllReduce(Communicator* comm) {
  Cancellation cancel;
  cancel.Cancel(absl::CancelledError("training run 7 was aborted"));
  CallOptions call;
  call.algorithm = Algorithm::kReduceBroadcast;
  call.cancel = &cancel;
  std::vector<float> data(kCount, 1.0f);
  return comm->AllReduce(
      absl::MakeSpan(reinterpret_cast<std::byte*>(data.data()),
                     data.size() * sizeof(float)),
      DataType::kFloat32, ReduceOp::kSum, call);
}

// Writes each peer posts to rank 0 in one reduce-broadcast all-reduce.
uint64_t WritesPerPeer() {
  return ChunkPlanner(sizeof(float), kChunkBytes)
      .NumChunks(kCount * sizeof(float));
}

absl::Status Await(const absl::Notification& n, absl::string_view what) {
  if (n.WaitForNotificationWithTimeout(kTimeout)) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrCat("no ", what));
}

TEST(LateOpWritesOverTcp, WritesForACancelledAllReduceAreDroppedNotHeld) {
  ASSERT_OK_AND_ASSIGN(Group group, FormGroup());
  absl::Notification rank0_gave_up;
  absl::Status rank0_op0, peer_op0[kRanks];
  uint64_t retired_end = 0, dropped = 0;
  size_t early_bytes = 1;
  const auto statuses =
      RunRanks(group.raw, Options(), [&](int rank, Communicator* comm) {
        if (rank == 0) {
          // Op 0 ends here before any peer has written to it.
          rank0_op0 = CancelledAllReduce(comm);
          retired_end = comm->retired_op_seq_end();
          rank0_gave_up.Notify();
        } else {
          absl::Status s = Await(rank0_gave_up, "cancellation on rank 0");
          if (!s.ok()) return s;
          // Their writes for op 0 reach rank 0 after it retired op 0.
          peer_op0[rank] = CancelledAllReduce(comm);
        }
        absl::Status s = AllReduceIsExact(comm, 1, Algorithm::kReduceBroadcast);
        if (!s.ok()) return s;
        if (rank == 0) {
          dropped = comm->stale_writes_dropped();
          early_bytes = group.tcp[0]->early_bytes();
        }
        s = AllReduceIsExact(comm, 2, Algorithm::kAuto);
        if (!s.ok()) return s;
        comm->SkipTo(1000);
        return AllReduceIsExact(comm, 3, Algorithm::kButterfly);
      });
  ASSERT_OK(FirstError(statuses));
  EXPECT_THAT(rank0_op0, StatusIs(absl::StatusCode::kCancelled,
                                  AllOf(HasSubstr("allreduce op 0"),
                                        HasSubstr("run 7 was aborted"))));
  for (int rank = 1; rank < kRanks; ++rank) {
    EXPECT_THAT(peer_op0[rank], StatusIs(absl::StatusCode::kCancelled))
        << "rank " << rank;
  }
  EXPECT_EQ(retired_end, 1u);
  EXPECT_EQ(dropped, (kRanks - 1) * WritesPerPeer());
  EXPECT_EQ(early_bytes, 0u);
  // Every later write landed in a live op.
  EXPECT_EQ(group.tcp[0]->stale_writes_dropped(), dropped);
}

TEST(LateOpWritesOverTcp, WritesForOpsSkippedBySkipToAreDroppedNotHeld) {
  ASSERT_OK_AND_ASSIGN(Group group, FormGroup());
  constexpr uint64_t kNextRun = 100;
  absl::Notification rank0_skipped;
  absl::Status peer_op1[kRanks];
  absl::Status register_skipped[2], register_next;
  uint64_t dropped = 0;
  size_t early_bytes = 1;
  const auto statuses =
      RunRanks(group.raw, Options(), [&](int rank, Communicator* comm) {
        // The previous run's op 0 goes well everywhere.
        absl::Status s = AllReduceIsExact(comm, 1, Algorithm::kAuto);
        if (!s.ok()) return s;
        if (rank == 0) {
          // Rank 0 moves on to the next run while the others are still in
          // the old one.
          comm->SkipTo(kNextRun);
          transport::Transport* t = group.raw[0];
          std::vector<std::byte> probe(8);
          register_skipped[0] = t->RegisterRegion(OpRegionId(1, Region::kData),
                                                  absl::MakeSpan(probe));
          register_skipped[1] =
              t->RegisterRegion(OpRegionId(kNextRun - 1, Region::kScratch),
                                absl::MakeSpan(probe));
          register_next = t->RegisterRegion(OpRegionId(kNextRun, Region::kData),
                                            absl::MakeSpan(probe));
          if (register_next.ok()) {
            s = t->DeregisterRegion(OpRegionId(kNextRun, Region::kData));
            if (!s.ok()) return s;
          }
          rank0_skipped.Notify();
        } else {
          s = Await(rank0_skipped, "SkipTo on rank 0");
          if (!s.ok()) return s;
          // The old run's op 1, abandoned after its writes to rank 0.
          peer_op1[rank] = CancelledAllReduce(comm);
          comm->SkipTo(kNextRun);
        }
        s = AllReduceIsExact(comm, 2, Algorithm::kReduceBroadcast);
        if (!s.ok()) return s;
        if (rank == 0) {
          dropped = comm->stale_writes_dropped();
          early_bytes = group.tcp[0]->early_bytes();
        }
        return AllReduceIsExact(comm, 3, Algorithm::kAuto);
      });
  ASSERT_OK(FirstError(statuses));
  for (const absl::Status& s : register_skipped) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition,
                            HasSubstr("retired")));
  }
  EXPECT_OK(register_next);
  for (int rank = 1; rank < kRanks; ++rank) {
    EXPECT_THAT(peer_op1[rank], StatusIs(absl::StatusCode::kCancelled,
                                         HasSubstr("allreduce op 1")))
        << "rank " << rank;
  }
  EXPECT_EQ(dropped, (kRanks - 1) * WritesPerPeer());
  EXPECT_EQ(early_bytes, 0u);
}

}  // namespace
}  // namespace collective
}  // namespace starling
