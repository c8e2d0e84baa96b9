#include "server/node/sync/sync_engine.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/collective/communicator.h"
#include "server/metrics/metrics_registry.h"
#include "server/node/run/run_manager.h"
#include "server/node/run/run_rendezvous.h"
#include "server/transport/transport.h"

namespace starling {
namespace node {
namespace {

constexpr size_t kPoolBytes = 32768;

// A group of one: the collectives have no peer to move data to, so the
// test sees the engine's own work alone.
class SoloTransport : public transport::Transport {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string PeerName(int rank) const override {
    return "rank " + std::to_string(rank) + " (solo)";
  }
  absl::Status RegisterRegion(transport::RegionId,
                              absl::Span<std::byte>) override {
    return absl::OkStatus();
  }
  absl::Status DeregisterRegion(transport::RegionId) override {
    return absl::OkStatus();
  }
  void RetireRegions(transport::RegionId, transport::RegionId) override {}
  uint64_t stale_writes_dropped() const override { return 0; }
  void Write(int, absl::Span<const std::byte>, transport::RegionId, uint64_t,
             uint32_t, transport::Completion*) override {
    ADD_FAILURE() << "a write in a group of one";
  }
  absl::StatusOr<transport::WriteNotice> WaitForWrite(
      const transport::WriteMatch&, absl::Time) override {
    return absl::InternalError("no peers");
  }
  absl::Status SendControl(int, uint32_t,
                           absl::Span<const std::byte>) override {
    return absl::InternalError("no peers");
  }
  absl::StatusOr<std::vector<std::byte>> RecvControl(int, uint32_t,
                                                     absl::Time) override {
    return absl::InternalError("no peers");
  }
  size_t max_control_bytes() const override { return 1024; }
  absl::Status PeerStatus(int) const override { return absl::OkStatus(); }
  void AbortPeer(int, const absl::Status&) override {}
};

// Begins every run at once with `total_workers` workers.
class FakeRendezvous : public RunRendezvous {
 public:
  explicit FakeRendezvous(int total_workers) : total_workers_(total_workers) {}
  absl::StatusOr<Begun> BeginRun(const std::vector<proto::TensorSpec>&,
                                 const std::string& local_error,
                                 std::optional<uint32_t>, int,
                                 uint64_t next_op_seq, absl::Time) override {
    if (!local_error.empty()) return absl::InvalidArgumentError(local_error);
    return Begun{++runs_, next_op_seq, total_workers_};
  }
  void EndRun(const proto::RunStatus&) override {}

 private:
  const int total_workers_;
  uint64_t runs_ = 0;
};

// A local worker as the engine sees it, with the test's own mapping of its
// pool (a sealed memfd, as the client makes it).
class TestWorker {
 public:
  explicit TestWorker(int index) {
    const int fd = ::memfd_create("sync_engine_test", MFD_ALLOW_SEALING);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::ftruncate(fd, kPoolBytes), 0);
    EXPECT_EQ(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
    base_ = static_cast<std::byte*>(
        ::mmap(nullptr, kPoolBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    EXPECT_NE(base_, MAP_FAILED);
    absl::StatusOr<std::unique_ptr<WorkerPool>> pool =
        WorkerPool::Map(ScopedFd(::dup(fd)), kPoolBytes);
    EXPECT_OK(pool.status());
    ::close(fd);
    handle_.session = index + 1;
    handle_.index = index;
    handle_.name = "worker " + std::to_string(index);
    handle_.pool = std::move(*pool);
    handle_.responder = std::make_shared<Responder>();
  }
  ~TestWorker() { ::munmap(base_, kPoolBytes); }

  const WorkerHandle& handle() const { return handle_; }
  float* at(uint64_t offset_bytes) {
    return reinterpret_cast<float*>(base_ + offset_bytes);
  }
  // The next reply's status.
  absl::Status NextReply() {
    std::string frame;
    ScopedFd pass_fd;  // closed here
    if (!handle_.responder->Next(&frame, &pass_fd)) {
      return absl::InternalError("no reply");
    }
    proto::WorkerResponse response;
    EXPECT_TRUE(response.ParseFromString(frame));
    return absl::Status(static_cast<absl::StatusCode>(response.code()),
                        response.message());
  }

 private:
  std::byte* base_ = nullptr;
  WorkerHandle handle_;
};

proto::PoolSlice Slice(const std::string& tensor, uint64_t offset_bytes,
                       uint64_t elements) {
  proto::PoolSlice slice;
  slice.set_tensor(tensor);
  slice.set_offset_bytes(offset_bytes);
  slice.set_elements(elements);
  return slice;
}

class SyncEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto comm = collective::Communicator::Create(&transport_);
    ASSERT_OK(comm.status());
    comm_ = std::move(*comm);
    auto metrics = NodeMetrics::Register(&registry_);
    ASSERT_OK(metrics.status());
    metrics_ = *metrics;
    RunManagerOptions options;
    options.local_workers = 2;
    options.optimizer = "sgd";
    options.learning_rate = 1.0f;
    options.timeout = absl::Seconds(10);
    options.self = "rank 0 (test)";
    runs_ = std::make_unique<RunManager>(options, comm_.get(), &transport_,
                                         &metrics_, &rendezvous_, nullptr);
    SyncEngineOptions sync_options;
    sync_options.timeout = options.timeout;
    sync_options.self = options.self;
    engine_ = std::make_unique<SyncEngine>(sync_options, runs_.get(),
                                           comm_.get(), &metrics_);
    runs_->Start(engine_.get());
    engine_->Start();
    for (int i = 0; i < 2; ++i) {
      workers_.push_back(std::make_unique<TestWorker>(i));
      proto::HelloReply hello;
      ASSERT_OK(runs_->Attach(workers_[i]->handle(), &hello));
    }
  }
  void TearDown() override {
    runs_->Stop();
    engine_->Stop();
  }

  // Every worker declares `tensors` (name, elements) and ends the
  // declarations.
  void Begin(const std::vector<std::pair<std::string, int>>& tensors) {
    for (auto& w : workers_) {
      for (const auto& [name, elements] : tensors) {
        proto::WorkerRequest request;
        proto::TensorSpec* spec =
            request.mutable_declare_tensor()->mutable_spec();
        spec->set_name(name);
        spec->add_shape(elements);
        spec->set_dtype(proto::DATA_TYPE_FLOAT32);
        runs_->Declare(w->handle(), request);
        ASSERT_OK(w->NextReply());
      }
    }
    proto::WorkerRequest commit;
    commit.mutable_commit_tensors();
    for (auto& w : workers_) runs_->Submit(w->handle(), commit);
    for (auto& w : workers_) ASSERT_OK(w->NextReply());
  }

  // Worker i pushes slices[i] for `step`; waits for the step.
  void Push(int64_t step,
            const std::vector<std::vector<proto::PoolSlice>>& slices) {
    for (size_t i = 0; i < workers_.size(); ++i) {
      proto::WorkerRequest request;
      request.mutable_push_gradients()->set_step(step);
      for (const proto::PoolSlice& s : slices[i]) {
        *request.mutable_push_gradients()->add_slices() = s;
      }
      engine_->Push(workers_[i]->handle(), request);
    }
    for (auto& w : workers_) ASSERT_OK(w->NextReply());
  }

  void Pull(TestWorker& w, int64_t version,
            const std::vector<proto::PoolSlice>& slices) {
    proto::WorkerRequest request;
    request.mutable_pull_parameters()->set_version(version);
    for (const proto::PoolSlice& s : slices) {
      *request.mutable_pull_parameters()->add_slices() = s;
    }
    engine_->Pull(w.handle(), request);
    ASSERT_OK(w.NextReply());
  }

  void Finish() {
    proto::WorkerRequest request;
    request.mutable_finish();
    for (auto& w : workers_) runs_->Submit(w->handle(), request);
    for (auto& w : workers_) ASSERT_OK(w->NextReply());
  }

  SoloTransport transport_;
  std::unique_ptr<collective::Communicator> comm_;
  metrics::MetricsRegistry registry_;
  NodeMetrics metrics_;
  FakeRendezvous rendezvous_{2};
  std::unique_ptr<RunManager> runs_;
  std::unique_ptr<SyncEngine> engine_;
  std::vector<std::unique_ptr<TestWorker>> workers_;
};

// Pool offsets (bytes) of the test's buffers.
constexpr uint64_t kA = 0, kB = 64, kC = 128, kPulled = 1024, kSum = 4096;

TEST_F(SyncEngineTest, LocalReduceSumsWhatWasPushedAndZeroesTheRest) {
  Begin({{"a", 5}, {"b", 3}, {"c", 4}});
  TestWorker& w0 = *workers_[0];
  TestWorker& w1 = *workers_[1];
  // Exact binary fractions: every order of summation gives these sums.
  for (int i = 0; i < 5; ++i) {
    w0.at(kA)[i] = 1.0f + i;
    w1.at(kA)[i] = 0.5f * i;
  }
  for (int i = 0; i < 3; ++i) w0.at(kB)[i] = 4.0f;
  for (int i = 0; i < 4; ++i) w1.at(kC)[i] = -2.0f * i;
  // Worker 1 pushes `a` twice (both count) and `c`; nobody pushes nothing.
  Push(0, {{Slice("a", kA, 5), Slice("b", kB, 3)},
           {Slice("a", kA, 5), Slice("c", kC, 4), Slice("a", kA, 5)}});
  // Step 1: only `a`, from worker 0; `b` and `c` (stale in the gradient
  // buffer from step 0) must count as zeros.
  Push(1, {{Slice("a", kA, 5)}, {}});

  const std::vector<proto::PoolSlice> all = {Slice("a", kPulled, 5),
                                             Slice("b", kPulled + 64, 3),
                                             Slice("c", kPulled + 128, 4)};
  Pull(w0, 2, all);
  Pull(w1, 2, all);
  // sgd, learning rate 1, gradient scale 1 / 2 workers; parameters start
  // at 0.
  for (TestWorker* w : {&w0, &w1}) {
    for (int i = 0; i < 5; ++i) {
      const float step0 = (1.0f + i) + 2 * 0.5f * i;
      const float step1 = 1.0f + i;
      EXPECT_EQ(w->at(kPulled)[i], -0.5f * step0 - 0.5f * step1) << i;
    }
    for (int i = 0; i < 3; ++i) EXPECT_EQ(w->at(kPulled + 64)[i], -2.0f);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(w->at(kPulled + 128)[i], 1.0f * i);
  }
  // Bytes read + written: step 0 reads 3 + 1 + 1 buffers of a, b, c and
  // writes each once; step 1 reads a once, writes a and zeroes b and c.
  const double f = sizeof(float);
  EXPECT_EQ(metrics_.local_reduce_copied_bytes->value(),
            (4 * 5 + 2 * 3 + 2 * 4) * f + (2 * 5 + 3 + 4) * f);
  EXPECT_EQ(metrics_.pull_copied_bytes->value(), 2 * 2 * 12 * f);
  Finish();
}

TEST_F(SyncEngineTest, WorkerAllReduceSumsIntoEveryBuffer) {
  Begin({{"x", 2}});
  TestWorker& w0 = *workers_[0];
  TestWorker& w1 = *workers_[1];
  const int n = 3000;  // more than one block of the reduce kernels
  for (int i = 0; i < n; ++i) {
    w0.at(kSum)[i] = 0.25f * i;
    w1.at(kSum)[i] = 1.0f;
  }
  proto::WorkerRequest request;
  request.mutable_collective()->set_kind(
      proto::CollectiveRequest::KIND_ALL_REDUCE);
  request.mutable_collective()->set_dtype(proto::DATA_TYPE_FLOAT32);
  request.mutable_collective()->set_op(proto::REDUCE_OP_SUM);
  *request.mutable_collective()->mutable_slice() = Slice("", kSum, n);
  for (auto& w : workers_) runs_->Submit(w->handle(), request);
  for (auto& w : workers_) ASSERT_OK(w->NextReply());
  for (TestWorker* w : {&w0, &w1}) {
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(w->at(kSum)[i], 0.25f * i + 1.0f) << i;
    }
  }
  // One pass over both inputs into the send buffer, then a copy back into
  // each worker's buffer.
  EXPECT_EQ(metrics_.allreduce_staging_copied_bytes->value(),
            (3.0 + 2 * 2.0) * n * sizeof(float));
  Finish();
}

}  // namespace
}  // namespace node
}  // namespace starling
