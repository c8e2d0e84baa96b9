#include "client/python/collective_executor.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace starling {
namespace torch_backend {
namespace {

// A collective table whose collectives complete at once with `code`, or
// never (`hold`: kept for the test to complete), and whose pool refuses
// allocations over `pool_limit`.
struct FakeApi {
  StarlingCollectiveApi api{};
  absl::Mutex mu;
  std::vector<size_t> allocations;
  std::vector<std::unique_ptr<char[]>> memory;
  size_t pool_limit = size_t{1} << 30;
  int code = 0;
  std::string message;
  bool hold = false;
  std::vector<std::pair<StarlingDone, void*>> held;
  int started = 0;

  FakeApi() {
    api.version = STARLING_COLLECTIVE_API_VERSION;
    api.client = this;
    api.total_workers = [](void*) { return 1; };
    api.slot = [](void*) { return 0; };
    api.allocate = [](void* self, size_t bytes, char* error,
                      size_t error_bytes) -> void* {
      FakeApi& f = *static_cast<FakeApi*>(self);
      absl::MutexLock lock(&f.mu);
      if (bytes > f.pool_limit) {
        std::snprintf(error, error_bytes, "pool full: %zu bytes asked", bytes);
        return nullptr;
      }
      f.allocations.push_back(bytes);
      f.memory.push_back(std::make_unique<char[]>(bytes));
      return f.memory.back().get();
    };
    api.start = [](void* self, int, void*, size_t, int, int, int,
                   StarlingDone done, void* arg) {
      FakeApi& f = *static_cast<FakeApi*>(self);
      int code;
      std::string message;
      {
        absl::MutexLock lock(&f.mu);
        ++f.started;
        if (f.hold) {
          f.held.emplace_back(done, arg);
          return;
        }
        code = f.code;
        message = f.message;
      }
      done(arg, code, message.c_str());
    };
  }
};

CollectiveExecutor::Options SmallOptions() {
  CollectiveExecutor::Options options;
  options.collective_timeout = absl::Milliseconds(200);
  options.min_scratch_bytes = 1024;
  return options;
}

// Submits `body` and returns its status once done.
absl::Status RunOp(
    CollectiveExecutor& executor,
    std::function<absl::Status(CollectiveExecutor::Context&)> body) {
  absl::Notification done;
  absl::Status result;
  CollectiveExecutor::Op op;
  op.body = std::move(body);
  op.done = [&](const absl::Status& status) {
    result = status;
    done.Notify();
  };
  executor.Submit(std::move(op));
  done.WaitForNotification();
  return result;
}

TEST(CollectiveExecutor, RunsOpsInSubmissionOrder) {
  FakeApi fake;
  CollectiveExecutor executor(&fake.api, nullptr, SmallOptions());
  absl::Mutex mu;
  std::vector<int> ran;
  std::vector<int> finished;
  absl::Notification last;
  for (int i = 0; i < 50; ++i) {
    CollectiveExecutor::Op op;
    op.body = [&, i](CollectiveExecutor::Context&) {
      absl::MutexLock lock(&mu);
      ran.push_back(i);
      return absl::OkStatus();
    };
    op.done = [&, i](const absl::Status& status) {
      EXPECT_TRUE(status.ok());
      absl::MutexLock lock(&mu);
      finished.push_back(i);
      if (i == 49) last.Notify();
    };
    executor.Submit(std::move(op));
  }
  last.WaitForNotification();
  absl::MutexLock lock(&mu);
  ASSERT_EQ(ran.size(), 50u);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(ran[i], i);
    EXPECT_EQ(finished[i], i);
  }
}

TEST(CollectiveExecutor, ScratchGrowsGeometrically) {
  FakeApi fake;
  CollectiveExecutor executor(&fake.api, nullptr, SmallOptions());
  for (size_t bytes : {100, 1500, 2048, 5000, 10}) {
    ASSERT_TRUE(RunOp(executor, [bytes](CollectiveExecutor::Context& c) {
                  absl::StatusOr<absl::Span<std::byte>> s = c.Scratch(bytes);
                  if (!s.ok()) return s.status();
                  EXPECT_EQ(s->size(), bytes);
                  std::memset(s->data(), 1, bytes);  // writable
                  return absl::OkStatus();
                }).ok());
  }
  absl::MutexLock lock(&fake.mu);
  EXPECT_EQ(fake.allocations, (std::vector<size_t>{1024, 2048, 5000}));
}

TEST(CollectiveExecutor, AFullPoolGetsTheExactSizeOrSaysHowToGrow) {
  FakeApi fake;
  fake.pool_limit = 3000;
  CollectiveExecutor executor(&fake.api, nullptr, SmallOptions());
  auto scratch = [](size_t bytes) {
    return [bytes](CollectiveExecutor::Context& c) {
      return c.Scratch(bytes).status();
    };
  };
  EXPECT_TRUE(RunOp(executor, scratch(2000)).ok());
  EXPECT_TRUE(RunOp(executor, scratch(2500)).ok());  // 4096 refused
  const absl::Status status = RunOp(executor, scratch(4000));
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("pool full"), absl::string_view::npos);
  EXPECT_NE(status.message().find("STARLING_POOL_BYTES"),
            absl::string_view::npos);
  absl::MutexLock lock(&fake.mu);
  EXPECT_EQ(fake.allocations, (std::vector<size_t>{2000, 2500}));
}

TEST(CollectiveExecutor, ACollectivesErrorIsTheOpsAndTheNextOpRuns) {
  FakeApi fake;
  fake.code = static_cast<int>(absl::StatusCode::kInvalidArgument);
  fake.message = "shapes differ: slot 0 has 3, slot 1 has 4";
  CollectiveExecutor executor(&fake.api, nullptr, SmallOptions());
  auto all_reduce = [](CollectiveExecutor::Context& c) {
    return c.Collective(STARLING_ALL_REDUCE, c.Scratch(8).value(),
                        STARLING_FLOAT32);
  };
  EXPECT_EQ(RunOp(executor, all_reduce),
            absl::InvalidArgumentError(fake.message));
  {
    absl::MutexLock lock(&fake.mu);
    fake.code = 0;
  }
  EXPECT_TRUE(RunOp(executor, all_reduce).ok());
}

TEST(CollectiveExecutor, ACollectiveThatNeverEndsIsStickyAndLateDoneIsSafe) {
  FakeApi fake;
  fake.hold = true;
  CollectiveExecutor executor(&fake.api, nullptr, SmallOptions());
  const absl::Status first =
      RunOp(executor, [](CollectiveExecutor::Context& c) {
        return c.Collective(STARLING_BARRIER, {}, STARLING_INT32);
      });
  EXPECT_EQ(first.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(first.message().find("did not complete within"),
            absl::string_view::npos);
  bool ran = false;
  const absl::Status second =
      RunOp(executor, [&ran](CollectiveExecutor::Context&) {
        ran = true;
        return absl::OkStatus();
      });
  EXPECT_FALSE(ran);
  EXPECT_EQ(second.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(second.message().find("an earlier collective"),
            absl::string_view::npos);
  // The held collective ends after all: its callback finds its state.
  absl::MutexLock lock(&fake.mu);
  for (auto& [done, arg] : fake.held) done(arg, 0, "");
}

TEST(CollectiveExecutor, ShutdownRefusesWhatDidNotStart) {
  FakeApi fake;
  fake.hold = true;
  auto executor =
      std::make_unique<CollectiveExecutor>(&fake.api, nullptr, SmallOptions());
  absl::Notification started;
  std::vector<absl::Status> statuses(3);
  absl::Notification finished[3];
  for (int i = 0; i < 3; ++i) {
    CollectiveExecutor::Op op;
    op.body = [&, i](CollectiveExecutor::Context& c) {
      if (i == 0) started.Notify();
      return c.Collective(STARLING_BARRIER, {}, STARLING_INT32);
    };
    op.done = [&, i](const absl::Status& status) {
      statuses[i] = status;
      finished[i].Notify();
    };
    executor->Submit(std::move(op));
  }
  started.WaitForNotification();
  executor->Shutdown();  // waits for op 0 (its collective times out)
  for (auto& f : finished) f.WaitForNotification();
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kDeadlineExceeded);
  for (int i = 1; i < 3; ++i) {
    EXPECT_EQ(statuses[i].code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(statuses[i].message().find("shut down"), absl::string_view::npos);
  }
  const absl::Status late = RunOp(
      *executor, [](CollectiveExecutor::Context&) { return absl::OkStatus(); });
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition);
  executor.reset();
  absl::MutexLock lock(&fake.mu);
  for (auto& [done, arg] : fake.held) done(arg, 0, "");
}

TEST(CollectiveExecutor, AnExceptionFromABodyIsAnInternalError) {
  FakeApi fake;
  CollectiveExecutor executor(&fake.api, nullptr, SmallOptions());
  const absl::Status status =
      RunOp(executor, [](CollectiveExecutor::Context&) -> absl::Status {
        throw std::runtime_error("copy_ failed");
      });
  EXPECT_EQ(status, absl::InternalError("copy_ failed"));
}

TEST(CollectiveExecutor, ReleasesTheApiOwnerLast) {
  FakeApi fake;
  bool released = false;
  {
    std::shared_ptr<void> owner(&fake, [&released](void*) { released = true; });
    CollectiveExecutor executor(&fake.api, std::move(owner), SmallOptions());
    EXPECT_TRUE(RunOp(executor, [](CollectiveExecutor::Context& c) {
                  return c.Collective(STARLING_BARRIER, {}, STARLING_INT32);
                }).ok());
    EXPECT_FALSE(released);
  }
  EXPECT_TRUE(released);
}

}  // namespace
}  // namespace torch_backend
}  // namespace starling
