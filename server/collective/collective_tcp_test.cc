// A subset of the collective grid over the real TCP transport on 127.0.0.1
// (the loopback fake completes writes synchronously; TCP completes them
// asynchronously from its event loop, with real framing and striping).
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/collective/collective_test_util.h"
#include "server/collective/communicator.h"
#include "server/transport/tcp/tcp_test_util.h"
#include "server/transport/tcp/tcp_transport.h"

namespace starling {
namespace collective {
namespace {

using ::testing::HasSubstr;

std::vector<transport::Transport*> Raw(
    const std::vector<std::unique_ptr<transport::tcp::TcpTransport>>& group) {
  std::vector<transport::Transport*> out;
  for (const auto& t : group) out.push_back(t.get());
  return out;
}

TEST(CollectiveOverTcp, EveryAlgorithmAndOpMatchesTheReference) {
  for (int size : {2, 3, 4, 5, 8}) {
    ASSERT_OK_AND_ASSIGN(auto group, transport::tcp::CreateGroup(size));
    ASSERT_OK(CheckGridOnTransports(Raw(group))) << size << " ranks";
  }
}

TEST(CollectiveOverTcp, AllReducesAMillionAndThreeFloatsOnFourRanks) {
  ASSERT_OK_AND_ASSIGN(auto group, transport::tcp::CreateGroup(4));
  for (Algorithm algorithm : {Algorithm::kButterfly, Algorithm::kRing}) {
    GridCase c{4, 1000003, DataType::kFloat32, ReduceOp::kSum,
               ChunkPlanner::kDefaultChunkBytes};
    ASSERT_OK(CheckCollective(OpKind::kAllReduce, algorithm, c, Raw(group)));
  }
}

// Regression: a rank that had exchanged no data with another finished the
// last op and shut down (GOODBYE) while the other still waited for its own
// partner; the other's look for that rank's descriptor took the goodbye for
// a failure of the op. Each rank leaves as soon as its op returns.
TEST(CollectiveOverTcp, RanksThatFinishAndLeaveFailNoOneElse) {
  for (Algorithm algorithm :
       {Algorithm::kTree, Algorithm::kButterfly, Algorithm::kRing}) {
    for (int round = 0; round < 5; ++round) {
      ASSERT_OK_AND_ASSIGN(auto group, transport::tcp::CreateGroup(8));
      std::vector<transport::Transport*> transports = Raw(group);
      auto statuses = RunRanks(
          transports, CommunicatorOptions(), [&](int rank, Communicator* comm) {
            std::vector<float> data(1000, static_cast<float>(rank));
            CallOptions call;
            call.algorithm = algorithm;
            absl::Status s = comm->AllReduce(
                absl::MakeSpan(reinterpret_cast<std::byte*>(data.data()),
                               data.size() * sizeof(float)),
                DataType::kFloat32, ReduceOp::kSum, call);
            if (s.ok() && data[999] != 28.0f) {
              s = absl::InternalError("wrong sum");
            }
            group[rank].reset();  // says GOODBYE to every peer at once
            return s;
          });
      ASSERT_OK(FirstError(statuses))
          << AlgorithmName(algorithm) << ", round " << round;
    }
  }
}

TEST(CollectiveOverTcp, MismatchedCallsFailNamingBothRanks) {
  ASSERT_OK_AND_ASSIGN(auto group, transport::tcp::CreateGroup(3));
  CommunicatorOptions options;
  options.timeout = absl::Seconds(5);
  auto statuses =
      RunRanks(Raw(group), options, [](int rank, Communicator* comm) {
        std::vector<std::byte> data(rank == 1 ? 8 : 12);
        return comm->AllReduce(absl::MakeSpan(data), DataType::kFloat32,
                               ReduceOp::kSum);
      });
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_THAT(statuses[rank], StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("mismatched")));
  }
  EXPECT_THAT(statuses[0].message(), HasSubstr("rank 1 ("));
}

TEST(CollectiveOverTcp, SilentRankTimesOutNamingItsAddress) {
  ASSERT_OK_AND_ASSIGN(auto group, transport::tcp::CreateGroup(3));
  const std::string name = group[0]->PeerName(2);
  CommunicatorOptions options;
  options.timeout = absl::Milliseconds(500);
  auto statuses =
      RunRanks(Raw(group), options, [](int rank, Communicator* comm) {
        if (rank == 2) return absl::OkStatus();
        std::vector<std::byte> data(4000);
        CallOptions call;
        call.algorithm = Algorithm::kRing;
        return comm->AllReduce(absl::MakeSpan(data), DataType::kFloat32,
                               ReduceOp::kSum, call);
      });
  EXPECT_THAT(statuses[0],
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr(name)));
}

}  // namespace
}  // namespace collective
}  // namespace starling
