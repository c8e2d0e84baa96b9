// How op descriptors travel between ranks (op_context.h): only to the
// ranks an op exchanges data with while it runs fast; to every rank once a
// wait is long; from a failing rank to everyone. Eight ranks, so that most
// pairs of ranks exchange no data.
#include <atomic>
#include <cstddef>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_macros.h"
#include "server/base/status_matchers.h"
#include "server/collective/collective_observer.h"
#include "server/collective/collective_test_util.h"
#include "server/collective/communicator.h"
#include "server/collective/descriptor_inbox.h"
#include "server/transport/forwarding_transport.h"
#include "server/transport/loopback/loopback_transport.h"

namespace starling {
namespace collective {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int kRanks = 8;
constexpr Algorithm kAlgorithms[] = {Algorithm::kButterfly, Algorithm::kRing,
                                     Algorithm::kTree,
                                     Algorithm::kReduceBroadcast};

// Forwards to a loopback endpoint and records which peers it wrote data to
// and which it sent descriptors to.
class RecordingTransport : public transport::ForwardingTransport {
 public:
  explicit RecordingTransport(transport::Transport* base)
      : ForwardingTransport(base) {}

  std::set<int> written_to() const {
    absl::MutexLock lock(&mu_);
    return written_to_;
  }
  std::set<int> descriptors_to() const {
    absl::MutexLock lock(&mu_);
    return descriptors_to_;
  }
  int descriptors_sent() const {
    absl::MutexLock lock(&mu_);
    return descriptors_sent_;
  }

  void Write(int peer, absl::Span<const std::byte> data,
             transport::RegionId remote, uint64_t remote_offset_bytes,
             uint32_t imm, transport::Completion* done) override {
    {
      absl::MutexLock lock(&mu_);
      written_to_.insert(peer);
    }
    ForwardingTransport::Write(peer, data, remote, remote_offset_bytes, imm,
                               done);
  }
  absl::Status SendControl(int peer, uint32_t tag,
                           absl::Span<const std::byte> message) override {
    if (tag == kOpDescriptorTag) {
      absl::MutexLock lock(&mu_);
      descriptors_to_.insert(peer);
      ++descriptors_sent_;
    }
    return ForwardingTransport::SendControl(peer, tag, message);
  }

 private:
  mutable absl::Mutex mu_;
  std::set<int> written_to_ ABSL_GUARDED_BY(mu_);
  std::set<int> descriptors_to_ ABSL_GUARDED_BY(mu_);
  int descriptors_sent_ ABSL_GUARDED_BY(mu_) = 0;
};

// One rank's view of its ops, readable from the test thread.
class RecordingObserver : public CollectiveObserver {
 public:
  void OpStarted(const OpDescriptor&, uint64_t, absl::Time) override {}
  void PeerArrived(uint64_t, int peer, absl::Time) override {
    absl::MutexLock lock(&mu_);
    arrived_.insert(peer);
  }
  void OpEnded(const OpDescriptor&, uint64_t, const absl::Status&,
               absl::Duration, const ArrivalSummary& arrival) override {
    absl::MutexLock lock(&mu_);
    ended_ = true;
    arrival_ = arrival;
  }
  std::set<int> arrived() const {
    absl::MutexLock lock(&mu_);
    return arrived_;
  }
  bool ended() const {
    absl::MutexLock lock(&mu_);
    return ended_;
  }
  ArrivalSummary arrival() const {
    absl::MutexLock lock(&mu_);
    return arrival_;
  }

 private:
  mutable absl::Mutex mu_;
  std::set<int> arrived_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  ArrivalSummary arrival_ ABSL_GUARDED_BY(mu_);
};

CallOptions Forced(Algorithm algorithm) {
  CallOptions call;
  call.algorithm = algorithm;
  return call;
}

// Rank r's contribution: element i is r * 1000 + i (exact in float32).
std::vector<float> Contribution(int rank, size_t count) {
  std::vector<float> data(count);
  for (size_t i = 0; i < count; ++i) {
    data[i] = static_cast<float>(rank * 1000 + static_cast<int>(i));
  }
  return data;
}

absl::Status AllReduceAndCheck(Communicator* comm, size_t count,
                               const CallOptions& call) {
  std::vector<float> data = Contribution(comm->rank(), count);
  absl::Status s =
      comm->AllReduce(absl::MakeSpan(reinterpret_cast<std::byte*>(data.data()),
                                     data.size() * sizeof(float)),
                      DataType::kFloat32, ReduceOp::kSum, call);
  if (!s.ok()) return s;
  const int n = comm->size();
  for (size_t i = 0; i < count; ++i) {
    const double want = 1000.0 * n * (n - 1) / 2 + static_cast<double>(i) * n;
    if (data[i] != want) {
      return absl::InternalError(
          absl::StrCat("element ", i, " is ", data[i], ", want ", want));
    }
  }
  return absl::OkStatus();
}

TEST(DescriptorExchange, GoesOnlyWhereDataGoes) {
  for (Algorithm algorithm : kAlgorithms) {
    SCOPED_TRACE(AlgorithmName(algorithm));
    transport::loopback::LoopbackFabric fabric(kRanks);
    std::vector<std::unique_ptr<RecordingTransport>> recorders;
    std::vector<transport::Transport*> transports;
    for (int r = 0; r < kRanks; ++r) {
      recorders.push_back(
          std::make_unique<RecordingTransport>(fabric.endpoint(r)));
      transports.push_back(recorders.back().get());
    }
    constexpr int kOps = 4;
    ASSERT_OK(FirstError(RunRanks(
        transports, CommunicatorOptions(), [&](int, Communicator* comm) {
          for (int op = 0; op < kOps; ++op) {
            STARLING_RETURN_IF_ERROR(
                AllReduceAndCheck(comm, 1000, Forced(algorithm)));
          }
          return absl::OkStatus();
        })));
    int pairs = 0;
    for (int r = 0; r < kRanks; ++r) {
      // However long the waits were (a busy machine makes some long), a
      // descriptor went only to ranks this one wrote to, once per op.
      EXPECT_EQ(recorders[r]->descriptors_to(), recorders[r]->written_to())
          << "rank " << r;
      EXPECT_EQ(recorders[r]->descriptors_sent(),
                kOps * static_cast<int>(recorders[r]->written_to().size()))
          << "rank " << r;
      pairs += static_cast<int>(recorders[r]->descriptors_to().size());
    }
    // An exchange with every peer would be 56 a op.
    EXPECT_LT(pairs, kRanks * (kRanks - 1));
  }
}

TEST(DescriptorExchange, AMismatchFailsEveryRankAndTheGroupGoesOn) {
  for (Algorithm algorithm : kAlgorithms) {
    SCOPED_TRACE(AlgorithmName(algorithm));
    CommunicatorOptions options;
    options.timeout = absl::Seconds(10);
    auto statuses =
        RunOnLoopback(kRanks, options, [&](int rank, Communicator* comm) {
          std::vector<float> data = Contribution(rank, 1000);
          // Rank 5 asks for the maximum; its butterfly, ring, tree and
          // reduce-broadcast partners are a few of the seven others.
          absl::Status first = comm->AllReduce(
              absl::MakeSpan(reinterpret_cast<std::byte*>(data.data()),
                             data.size() * sizeof(float)),
              DataType::kFloat32, rank == 5 ? ReduceOp::kMax : ReduceOp::kSum,
              Forced(algorithm));
          if (first.code() != absl::StatusCode::kInvalidArgument ||
              first.message().find("mismatched") == absl::string_view::npos ||
              first.message().find("(max,") == absl::string_view::npos ||
              first.message().find("(sum,") == absl::string_view::npos) {
            return absl::InternalError(
                absl::StrCat("rank ", rank, ": ", first.ToString()));
          }
          return AllReduceAndCheck(comm, 1000, Forced(algorithm));
        });
    EXPECT_OK(FirstError(statuses));
  }
}

TEST(DescriptorExchange, WaitingRanksHearFromEveryoneAndNameTheStraggler) {
  for (Algorithm algorithm : {Algorithm::kButterfly, Algorithm::kRing}) {
    SCOPED_TRACE(AlgorithmName(algorithm));
    transport::loopback::LoopbackFabric fabric(kRanks);
    std::vector<std::unique_ptr<RecordingObserver>> observers;
    std::vector<std::unique_ptr<Communicator>> comms;
    for (int r = 0; r < kRanks; ++r) {
      observers.push_back(std::make_unique<RecordingObserver>());
      CommunicatorOptions options;
      options.observer = observers.back().get();
      options.timeout = absl::Seconds(30);
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> comm,
                           Communicator::Create(fabric.endpoint(r), options));
      comms.push_back(std::move(comm));
    }
    constexpr int kLate = kRanks - 1;
    std::vector<absl::Status> statuses(kRanks);
    std::vector<std::thread> threads;
    for (int r = 0; r < kLate; ++r) {
      threads.emplace_back([&, r] {
        statuses[r] =
            AllReduceAndCheck(comms[r].get(), 1000, Forced(algorithm));
      });
    }
    // Every rank in the op hears from every other one in it, partner or
    // not, and from no one else.
    std::set<int> in_op;
    for (int r = 0; r < kLate; ++r) in_op.insert(r);
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    for (int r = 0; r < kLate; ++r) {
      std::set<int> want = in_op;
      want.erase(r);
      while (observers[r]->arrived() != want && absl::Now() < deadline) {
        absl::SleepFor(absl::Milliseconds(2));  // polling, with a deadline
      }
      EXPECT_EQ(observers[r]->arrived(), want) << "rank " << r;
      EXPECT_FALSE(observers[r]->ended()) << "rank " << r;
    }
    threads.emplace_back([&] {
      statuses[kLate] =
          AllReduceAndCheck(comms[kLate].get(), 1000, Forced(algorithm));
    });
    for (std::thread& t : threads) t.join();
    ASSERT_OK(FirstError(statuses));
    for (int r = 0; r < kRanks; ++r) {
      EXPECT_EQ(observers[r]->arrival().last_rank, kLate) << "rank " << r;
    }
    // Notices that came after their op had ended (a rank that finished
    // before another's wait grew long) leave the next Communicators on the
    // same transports alone, whatever they call.
    comms.clear();
    std::vector<transport::Transport*> transports;
    for (int r = 0; r < kRanks; ++r) transports.push_back(fabric.endpoint(r));
    ASSERT_OK(FirstError(RunRanks(
        transports, CommunicatorOptions(), [&](int, Communicator* comm) {
          return AllReduceAndCheck(comm, 3000, Forced(Algorithm::kTree));
        })));
  }
}

}  // namespace
}  // namespace collective
}  // namespace starling
