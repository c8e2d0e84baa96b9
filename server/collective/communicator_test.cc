#include "server/collective/communicator.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/collective/collective_test_util.h"
#include "server/collective/op_context.h"
#include "server/collective/shard_layout.h"
#include "server/transport/loopback/loopback_transport.h"

namespace starling {
namespace collective {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::vector<std::byte> Floats(std::vector<float> values) {
  std::vector<std::byte> out(values.size() * 4);
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

float FloatAt(const std::vector<std::byte>& bytes, size_t i) {
  float f;
  std::memcpy(&f, bytes.data() + 4 * i, 4);
  return f;
}

CommunicatorOptions ShortTimeout() {
  CommunicatorOptions options;
  options.timeout = absl::Seconds(2);
  return options;
}

TEST(Communicator, CreateRejectsBadOptions) {
  EXPECT_THAT(Communicator::Create(nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  transport::loopback::LoopbackFabric fabric(1);
  CommunicatorOptions options;
  options.timeout = absl::ZeroDuration();
  EXPECT_THAT(Communicator::Create(fabric.endpoint(0), options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(Communicator, RejectsPartialElementsAndBadRoot) {
  transport::loopback::LoopbackFabric fabric(1);
  ASSERT_OK_AND_ASSIGN(auto comm, Communicator::Create(fabric.endpoint(0)));
  std::vector<std::byte> data(6);
  EXPECT_THAT(
      comm->AllReduce(absl::MakeSpan(data), DataType::kFloat32, ReduceOp::kSum),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("allreduce op 0")));
  EXPECT_THAT(
      comm->Broadcast(absl::MakeSpan(data), DataType::kFloat16, 3),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("root 3")));
  EXPECT_EQ(comm->next_op_seq(), 2u);
}

TEST(Communicator, RunsManyOpsBackToBackWithAutoSelection) {
  // Mixed sizes make the selector pick tree, butterfly and ring in turn;
  // each op must see only its own frames.
  for (int size : {3, 4, 6}) {
    auto statuses = RunOnLoopback(
        size, CommunicatorOptions(), [&](int rank, Communicator* comm) {
          for (size_t count : {1u, 5000u, 300000u, 3u}) {
            std::vector<float> values(count, static_cast<float>(rank + 1));
            std::vector<std::byte> data = Floats(values);
            absl::Status s = comm->AllReduce(
                absl::MakeSpan(data), DataType::kFloat32, ReduceOp::kSum);
            if (!s.ok()) return s;
            const float expected = size * (size + 1) / 2.0f;
            for (size_t i = 0; i < count; ++i) {
              if (FloatAt(data, i) != expected) {
                return absl::InternalError(
                    absl::StrCat("element ", i, " is ", FloatAt(data, i)));
              }
            }
            s = comm->Barrier();
            if (!s.ok()) return s;
          }
          return absl::OkStatus();
        });
    ASSERT_OK(FirstError(statuses)) << "N=" << size;
  }
}

TEST(Communicator, ReduceScatterUpdateAllGatherIsTheDaemonStep) {
  const int size = 5;
  const size_t count = 103;
  auto statuses = RunOnLoopback(
      size, CommunicatorOptions(), [&](int rank, Communicator* comm) {
        std::vector<std::byte> data = Floats(std::vector<float>(count, 1.0f));
        absl::Status s = comm->ReduceScatter(
            absl::MakeSpan(data), DataType::kFloat32, ReduceOp::kSum);
        if (!s.ok()) return s;
        const ShardLayout layout(count, size);
        for (size_t i = layout.Begin(rank); i < layout.End(rank); ++i) {
          const float updated = FloatAt(data, i) * 2;  // the "optimizer"
          std::memcpy(data.data() + 4 * i, &updated, 4);
        }
        s = comm->AllGather(absl::MakeSpan(data), DataType::kFloat32);
        if (!s.ok()) return s;
        for (size_t i = 0; i < count; ++i) {
          if (FloatAt(data, i) != 2.0f * size) {
            return absl::InternalError(absl::StrCat("element ", i));
          }
        }
        return absl::OkStatus();
      });
  ASSERT_OK(FirstError(statuses));
}

TEST(Communicator, ShiftHandsEachRanksBlockToTheRankDistanceAhead) {
  // Every distance of every group size up to 5, with blocks that need
  // several chunks: rank r's incoming half is exactly rank r - d's
  // outgoing half.
  for (int size = 1; size <= 5; ++size) {
    for (int distance = size == 1 ? 0 : 1; distance < std::max(size, 1);
         ++distance) {
      for (size_t half : {0u, 3u, 200000u}) {
        auto statuses = RunOnLoopback(
            size, CommunicatorOptions(), [&](int rank, Communicator* comm) {
              std::vector<float> values(2 * half, -1.0f);
              for (size_t i = 0; i < half; ++i) {
                values[i] = static_cast<float>(rank * 1000003 + i);
              }
              std::vector<std::byte> data = Floats(values);
              absl::Status s = comm->Shift(absl::MakeSpan(data),
                                           DataType::kFloat32, distance);
              if (!s.ok()) return s;
              const int from = (rank - distance + size) % size;
              for (size_t i = 0; i < half; ++i) {
                const float expected = static_cast<float>(from * 1000003 + i);
                if (FloatAt(data, half + i) != expected ||
                    FloatAt(data, i) != values[i]) {
                  return absl::InternalError(absl::StrCat(
                      "rank ", rank, " element ", i, ": ",
                      FloatAt(data, half + i), ", expected ", expected));
                }
              }
              return absl::OkStatus();
            });
        ASSERT_OK(FirstError(statuses))
            << "N=" << size << " d=" << distance << " half=" << half;
      }
    }
  }
}

TEST(Communicator, ShiftRejectsABadDistanceOrAnOddCount) {
  auto statuses =
      RunOnLoopback(3, ShortTimeout(), [](int rank, Communicator* comm) {
        std::vector<std::byte> data(16);
        if (rank == 0) {
          absl::Status s =
              comm->Shift(absl::MakeSpan(data), DataType::kFloat32, 3);
          if (!absl::IsInvalidArgument(s) ||
              !absl::StrContains(s.message(), "distance 3 is not in [1, 2]")) {
            return absl::InternalError(
                absl::StrCat("distance 3: ", s.ToString()));
          }
          std::vector<std::byte> odd(12);
          s = comm->Shift(absl::MakeSpan(odd), DataType::kFloat32, 1);
          if (!absl::IsInvalidArgument(s) ||
              !absl::StrContains(s.message(), "3 float32 elements")) {
            return absl::InternalError(
                absl::StrCat("odd count: ", s.ToString()));
          }
          return absl::OkStatus();
        }
        // The others ran ops 0 and 1 too and time out naming rank 0.
        absl::Status s =
            comm->Shift(absl::MakeSpan(data), DataType::kFloat32, 1);
        if (s.ok()) return absl::InternalError("op 0 succeeded alone");
        return absl::OkStatus();
      });
  ASSERT_OK(FirstError(statuses));
}

TEST(Communicator, ShiftsWithDifferentDistancesFailNamingBothCalls) {
  auto statuses =
      RunOnLoopback(3, ShortTimeout(), [](int rank, Communicator* comm) {
        std::vector<std::byte> data(16);
        return comm->Shift(absl::MakeSpan(data), DataType::kFloat32,
                           rank == 1 ? 2 : 1);
      });
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_THAT(statuses[rank],
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("shift of 2 float32 by 1 rank(s)"),
                               HasSubstr("shift of 2 float32 by 2 rank(s)"))))
        << "rank " << rank;
  }
}

TEST(Communicator, MismatchedCountsFailOnEveryRankNamingBothCalls) {
  auto statuses =
      RunOnLoopback(4, ShortTimeout(), [](int rank, Communicator* comm) {
        std::vector<std::byte> data(rank == 2 ? 48 : 40);
        return comm->AllReduce(absl::MakeSpan(data), DataType::kFloat32,
                               ReduceOp::kSum);
      });
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(
        statuses[rank],
        StatusIs(absl::StatusCode::kInvalidArgument,
                 AllOf(HasSubstr("allreduce op 0"), HasSubstr("mismatched"),
                       HasSubstr("12 float32"), HasSubstr("10 float32"))))
        << "rank " << rank;
  }
  EXPECT_THAT(statuses[0], StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("rank 2 (loopback) called")));
}

TEST(Communicator, MismatchedDtypeOrOpIsInvalidArgument) {
  auto statuses =
      RunOnLoopback(3, ShortTimeout(), [](int rank, Communicator* comm) {
        std::vector<std::byte> data(64);
        absl::Status first = comm->AllReduce(
            absl::MakeSpan(data),
            rank == 1 ? DataType::kInt32 : DataType::kFloat32, ReduceOp::kSum);
        if (first.code() != absl::StatusCode::kInvalidArgument) {
          return absl::InternalError(
              absl::StrCat("dtype mismatch gave ", first.ToString()));
        }
        absl::Status second =
            comm->AllReduce(absl::MakeSpan(data), DataType::kFloat32,
                            rank == 0 ? ReduceOp::kMax : ReduceOp::kSum);
        if (second.code() != absl::StatusCode::kInvalidArgument ||
            second.message().find("op 1") == absl::string_view::npos) {
          return absl::InternalError(
              absl::StrCat("op mismatch gave ", second.ToString()));
        }
        // The group is still usable afterwards.
        return comm->AllReduce(absl::MakeSpan(data), DataType::kFloat32,
                               ReduceOp::kSum);
      });
  ASSERT_OK(FirstError(statuses));
}

TEST(Communicator, KilledRankFailsTheOthersNamingIt) {
  for (Algorithm algorithm : {Algorithm::kButterfly, Algorithm::kRing,
                              Algorithm::kTree, Algorithm::kReduceBroadcast}) {
    transport::loopback::LoopbackFabric fabric(5);
    std::vector<transport::Transport*> transports;
    for (int r = 0; r < 5; ++r) transports.push_back(fabric.endpoint(r));
    const absl::Time start = absl::Now();
    auto statuses =
        RunRanks(transports, ShortTimeout(), [&](int rank, Communicator* comm) {
          if (rank == 3) {
            fabric.KillRankForTesting(3);
            return absl::OkStatus();
          }
          std::vector<std::byte> data(4000);
          CallOptions call;
          call.algorithm = algorithm;
          return comm->AllReduce(absl::MakeSpan(data), DataType::kFloat32,
                                 ReduceOp::kSum, call);
        });
    EXPECT_LT(absl::Now() - start, absl::Seconds(4));
    for (int rank : {0, 1, 2, 4}) {
      EXPECT_FALSE(statuses[rank].ok()) << AlgorithmName(algorithm);
      EXPECT_THAT(statuses[rank].message(), HasSubstr("allreduce op 0"));
    }
    // Every rank names a peer; at least the direct partners name rank 3.
    int naming_three = 0;
    for (int rank : {0, 1, 2, 4}) {
      if (statuses[rank].message().find("rank 3 (loopback)") !=
          absl::string_view::npos) {
        ++naming_three;
      }
    }
    EXPECT_GE(naming_three, 1) << AlgorithmName(algorithm);
  }
}

TEST(Communicator, SilentRankTimesOutNamingRankAndStep) {
  // Rank 2 never calls: the others fail within the timeout, naming it.
  CommunicatorOptions options;
  options.timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  auto statuses = RunOnLoopback(4, options, [](int rank, Communicator* comm) {
    if (rank == 2) return absl::OkStatus();
    std::vector<std::byte> data(4 * 1000);
    CallOptions call;
    call.algorithm = Algorithm::kButterfly;
    return comm->AllReduce(absl::MakeSpan(data), DataType::kFloat32,
                           ReduceOp::kSum, call);
  });
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  for (int rank : {0, 1, 3}) {
    EXPECT_THAT(statuses[rank],
                StatusIs(absl::StatusCode::kDeadlineExceeded,
                         AllOf(HasSubstr("allreduce op 0 (butterfly"),
                               HasSubstr("rank 2 (loopback)"),
                               HasSubstr("within 300ms"))))
        << "rank " << rank;
  }
}

TEST(Communicator, TimeoutNamesTheStepOfTheMissingData) {
  // A per-call timeout overrides the communicator's; the ring's waiting
  // rank names its silent neighbour.
  CallOptions call;
  call.algorithm = Algorithm::kRing;
  call.timeout = absl::Milliseconds(200);
  auto statuses = RunOnLoopback(
      3, CommunicatorOptions(), [&](int rank, Communicator* comm) {
        if (rank == 1) return absl::OkStatus();  // never calls op 0
        std::vector<std::byte> data(4 * 30);
        return comm->AllReduce(absl::MakeSpan(data), DataType::kFloat32,
                               ReduceOp::kSum, call);
      });
  EXPECT_THAT(statuses[0], StatusIs(absl::StatusCode::kDeadlineExceeded,
                                    HasSubstr("rank 1 (loopback)")));
}

TEST(Communicator, BarrierWaitsForEveryRank) {
  std::atomic<int> arrived{0};
  auto statuses = RunOnLoopback(
      6, CommunicatorOptions(), [&](int rank, Communicator* comm) {
        if (rank == 5) absl::SleepFor(absl::Milliseconds(50));
        arrived.fetch_add(1);
        absl::Status s = comm->Barrier();
        if (s.ok() && arrived.load() != 6) {
          return absl::InternalError("left the barrier before all arrived");
        }
        return s;
      });
  ASSERT_OK(FirstError(statuses));
}

TEST(Communicator, RetiresTheRegionsOfFailedAndSkippedOpsOnly) {
  transport::loopback::LoopbackFabric fabric(1);
  transport::Transport* t = fabric.endpoint(0);
  CommunicatorOptions options;
  options.retire_stale_regions = true;
  ASSERT_OK_AND_ASSIGN(auto comm, Communicator::Create(t, options));
  std::vector<std::byte> data(8), probe(8);
  ASSERT_OK(comm->AllReduce(absl::MakeSpan(data), DataType::kFloat32,
                            ReduceOp::kSum));  // op 0 succeeds
  EXPECT_EQ(comm->retired_op_seq_end(), 0u);
  // Op 1 is rejected before it starts: peers would still write into it.
  EXPECT_THAT(comm->AllReduce(absl::MakeSpan(data).first(6), DataType::kFloat32,
                              ReduceOp::kSum),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(comm->retired_op_seq_end(), 2u);
  for (uint64_t seq : {0u, 1u}) {
    for (Region region : {Region::kData, Region::kScratch}) {
      EXPECT_THAT(
          t->RegisterRegion(OpRegionId(seq, region), absl::MakeSpan(probe)),
          StatusIs(absl::StatusCode::kFailedPrecondition,
                   HasSubstr("retired")));
    }
  }
  comm->SkipTo(7);
  EXPECT_EQ(comm->retired_op_seq_end(), 7u);
  EXPECT_THAT(
      t->RegisterRegion(OpRegionId(6, Region::kScratch), absl::MakeSpan(probe)),
      StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_OK(
      t->RegisterRegion(OpRegionId(7, Region::kData), absl::MakeSpan(probe)));
  ASSERT_OK(t->DeregisterRegion(OpRegionId(7, Region::kData)));
  // Ids outside the collective range stay usable.
  ASSERT_OK(t->RegisterRegion(12, absl::MakeSpan(probe)));
  ASSERT_OK(comm->AllReduce(absl::MakeSpan(data), DataType::kFloat32,
                            ReduceOp::kSum));
  EXPECT_EQ(comm->retired_op_seq_end(), 7u);
}

TEST(Communicator, WithoutRetirementCommunicatorsMayShareATransport) {
  // Each Communicator numbers its ops from 0. Off (the default), a failed op
  // of one leaves its ids registrable for the next; on, the next one's op 0
  // is refused.
  for (bool retire : {false, true}) {
    transport::loopback::LoopbackFabric fabric(2);
    std::vector<transport::Transport*> transports = {fabric.endpoint(0),
                                                     fabric.endpoint(1)};
    CommunicatorOptions options = ShortTimeout();
    options.retire_stale_regions = retire;
    auto first = RunRanks(transports, options, [](int, Communicator* comm) {
      std::vector<std::byte> data(8);
      return comm->Broadcast(absl::MakeSpan(data), DataType::kFloat32, 5);
    });
    for (const absl::Status& s : first) {
      EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
    }
    auto second = RunRanks(transports, options, [](int, Communicator* comm) {
      std::vector<std::byte> data(8);
      return comm->AllReduce(absl::MakeSpan(data), DataType::kFloat32,
                             ReduceOp::kSum);
    });
    if (retire) {
      EXPECT_THAT(second[0], StatusIs(absl::StatusCode::kFailedPrecondition,
                                      HasSubstr("allreduce op 0")));
    } else {
      EXPECT_OK(FirstError(second));
    }
  }
}

TEST(Communicator, OpDescriptorRoundTripsAndDescribesItself) {
  OpDescriptor desc;
  desc.seq = 12;
  desc.kind = OpKind::kBroadcast;
  desc.algorithm = Algorithm::kTree;
  desc.dtype = DataType::kBFloat16;
  desc.count = 1u << 20;
  desc.root = 3;
  const auto wire = desc.Encode();
  ASSERT_OK_AND_ASSIGN(OpDescriptor back, OpDescriptor::Decode(wire));
  EXPECT_TRUE(back.Matches(desc));
  EXPECT_EQ(back.ToString(), "broadcast of 1048576 bfloat16 (root 3, tree)");
  EXPECT_THAT(OpDescriptor::Decode(absl::MakeConstSpan(wire).first(8)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace collective
}  // namespace starling
