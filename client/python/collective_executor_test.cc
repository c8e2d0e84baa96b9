#include "client/python/collective_executor.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
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
  // What happened, in order: "start B" for a collective of B bytes, and
  // what the tests' ops add.
  std::vector<std::string> log;
  std::vector<void*> started_data;

  void Log(std::string event) {
    absl::MutexLock lock(&mu);
    log.push_back(std::move(event));
  }
  // Waits (bounded) until `n` collectives were started.
  bool AwaitStarted(int n) {
    absl::MutexLock lock(&mu);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      return started >= n;
    };
    return mu.AwaitWithTimeout(absl::Condition(&reached), absl::Seconds(30));
  }
  // Completes the oldest held collective with `code`.
  void ReleaseOldest(int release_code = 0) {
    std::pair<StarlingDone, void*> first;
    {
      absl::MutexLock lock(&mu);
      ASSERT_FALSE(held.empty());
      first = held.front();
      held.erase(held.begin());
    }
    first.first(first.second, release_code, release_code == 0 ? "" : "failed");
  }

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
    api.start = [](void* self, int, void* data, size_t bytes, int, int, int,
                   StarlingDone done, void* arg) {
      FakeApi& f = *static_cast<FakeApi*>(self);
      int code;
      std::string message;
      {
        absl::MutexLock lock(&f.mu);
        ++f.started;
        f.log.push_back("start " + std::to_string(bytes));
        f.started_data.push_back(data);
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

// An op that stages `bytes` (filled with `fill`) and launches an all-reduce
// whose finish and done are logged as "finish B" and "done B <code>".
// It touches [bytes, bytes + 1) unless `touches` says otherwise.
CollectiveExecutor::Op LaunchOp(
    FakeApi& fake, size_t bytes, absl::Notification* ended = nullptr,
    std::vector<std::pair<uintptr_t, uintptr_t>> touches = {}) {
  CollectiveExecutor::Op op;
  op.name = "op " + std::to_string(bytes);
  op.touches =
      touches.empty()
          ? std::vector<std::pair<uintptr_t, uintptr_t>>{{bytes, bytes + 1}}
          : std::move(touches);
  op.body = [&fake, bytes](CollectiveExecutor::Context& c) {
    absl::StatusOr<absl::Span<std::byte>> s = c.Scratch(bytes);
    if (!s.ok()) return s.status();
    std::memset(s->data(), static_cast<int>(bytes), bytes);
    fake.Log("body " + std::to_string(bytes));
    return c.Launch(STARLING_ALL_REDUCE, *s, STARLING_FLOAT32, STARLING_SUM, 0,
                    [&fake, bytes, data = s->data()] {
                      // Its region was nobody else's meanwhile.
                      for (size_t i = 0; i < bytes; ++i) {
                        if (data[i] != static_cast<std::byte>(bytes)) {
                          return absl::DataLossError("scratch overwritten");
                        }
                      }
                      fake.Log("finish " + std::to_string(bytes));
                      return absl::OkStatus();
                    });
  };
  op.done = [&fake, bytes, ended](const absl::Status& status) {
    fake.Log("done " + std::to_string(bytes) + " " +
             std::string(absl::StatusCodeToString(status.code())));
    if (ended != nullptr) ended->Notify();
  };
  return op;
}

TEST(CollectiveExecutor, TheNextOpRunsWhileALaunchedCollectiveIsInFlight) {
  FakeApi fake;
  fake.hold = true;
  CollectiveExecutor executor(&fake.api, nullptr, SmallOptions());
  absl::Notification ended[3];
  executor.Submit(LaunchOp(fake, 8, &ended[0]));
  executor.Submit(LaunchOp(fake, 16, &ended[1]));
  executor.Submit(LaunchOp(fake, 24, &ended[2]));
  // All three are staged and started before the first completes.
  ASSERT_TRUE(fake.AwaitStarted(3));
  {
    absl::MutexLock lock(&fake.mu);
    EXPECT_EQ(fake.log,
              (std::vector<std::string>{"body 8", "start 8", "body 16",
                                        "start 16", "body 24", "start 24"}));
    // Each in its own scratch region.
    EXPECT_NE(fake.started_data[0], fake.started_data[1]);
    EXPECT_NE(fake.started_data[1], fake.started_data[2]);
    EXPECT_NE(fake.started_data[0], fake.started_data[2]);
  }
  for (int i = 0; i < 3; ++i) {
    fake.ReleaseOldest();
    ended[i].WaitForNotification();
  }
  absl::MutexLock lock(&fake.mu);
  EXPECT_EQ(
      std::vector<std::string>(fake.log.begin() + 6, fake.log.end()),
      (std::vector<std::string>{"finish 8", "done 8 OK", "finish 16",
                                "done 16 OK", "finish 24", "done 24 OK"}));
}

// An op whose memory overlaps an op in flight (it would read what that
// op's finish still writes: a broadcast into a tensor, then an all-reduce
// of it) waits for it; one whose touches are not known waits too.
TEST(CollectiveExecutor, AnOpTouchingWhatAnOpInFlightWritesWaitsForIt) {
  FakeApi fake;
  fake.hold = true;
  CollectiveExecutor executor(&fake.api, nullptr, SmallOptions());
  absl::Notification ended[3];
  executor.Submit(LaunchOp(fake, 8, &ended[0], {{1000, 2000}}));
  executor.Submit(LaunchOp(fake, 16, &ended[1], {{1500, 1600}}));
  ASSERT_TRUE(fake.AwaitStarted(1));
  fake.ReleaseOldest();
  ASSERT_TRUE(fake.AwaitStarted(2));
  executor.Submit(LaunchOp(fake, 24, &ended[2], {{5000, 6000}}));
  CollectiveExecutor::Op unknown = LaunchOp(fake, 32);
  unknown.touches.clear();
  absl::Notification unknown_ended;
  unknown.done = [&fake, &unknown_ended](const absl::Status& status) {
    fake.Log("done 32 " + std::string(absl::StatusCodeToString(status.code())));
    unknown_ended.Notify();
  };
  executor.Submit(std::move(unknown));
  ASSERT_TRUE(fake.AwaitStarted(3));
  fake.ReleaseOldest();
  fake.ReleaseOldest();
  ASSERT_TRUE(fake.AwaitStarted(4));
  fake.ReleaseOldest();
  for (auto& e : ended) e.WaitForNotification();
  unknown_ended.WaitForNotification();
  absl::MutexLock lock(&fake.mu);
  EXPECT_EQ(fake.log, (std::vector<std::string>{
                          "body 8", "start 8", "finish 8", "done 8 OK",
                          "body 16", "start 16",
                          // Disjoint: staged beside 16.
                          "body 24", "start 24",
                          // Not known: 16 and 24 end first.
                          "finish 16", "done 16 OK", "finish 24", "done 24 OK",
                          "body 32", "start 32", "finish 32", "done 32 OK"}));
}

TEST(CollectiveExecutor, AtMostMaxInFlightAndOpsEndInSubmissionOrder) {
  FakeApi fake;
  fake.hold = true;
  CollectiveExecutor::Options options = SmallOptions();
  options.max_in_flight = 2;
  CollectiveExecutor executor(&fake.api, nullptr, options);
  absl::Notification ended[3];
  for (int i = 0; i < 3; ++i) {
    executor.Submit(LaunchOp(fake, 8 * (i + 1), &ended[i]));
  }
  ASSERT_TRUE(fake.AwaitStarted(2));
  // The third waits for the first to end; it then reuses its region.
  fake.ReleaseOldest();
  ASSERT_TRUE(fake.AwaitStarted(3));
  fake.ReleaseOldest(static_cast<int>(absl::StatusCode::kInvalidArgument));
  fake.ReleaseOldest();
  for (auto& e : ended) e.WaitForNotification();
  absl::MutexLock lock(&fake.mu);
  EXPECT_EQ(fake.log,
            (std::vector<std::string>{
                "body 8", "start 8", "body 16", "start 16", "finish 8",
                "done 8 OK", "body 24", "start 24",
                // A failed collective's op has no finish.
                "done 16 INVALID_ARGUMENT", "finish 24", "done 24 OK"}));
  EXPECT_EQ(fake.started_data[2], fake.started_data[0]);
  EXPECT_EQ(fake.allocations.size(), 2u);
}

TEST(CollectiveExecutor, AWaitedCollectiveEndsTheOpsInFlightFirst) {
  FakeApi fake;
  CollectiveExecutor executor(&fake.api, nullptr, SmallOptions());
  executor.Submit(LaunchOp(fake, 8));
  const absl::Status status =
      RunOp(executor, [&fake](CollectiveExecutor::Context& c) {
        absl::Status s = c.Collective(STARLING_BARRIER, {}, STARLING_INT32);
        fake.Log("barrier");
        return s;
      });
  EXPECT_TRUE(status.ok());
  absl::MutexLock lock(&fake.mu);
  EXPECT_EQ(fake.log,
            (std::vector<std::string>{"body 8", "start 8", "finish 8",
                                      "done 8 OK", "start 0", "barrier"}));
}

TEST(CollectiveExecutor, ALaunchedCollectiveThatNeverEndsFailsWhatFollows) {
  FakeApi fake;
  fake.hold = true;
  CollectiveExecutor executor(&fake.api, nullptr, SmallOptions());
  absl::Notification ended[2];
  executor.Submit(LaunchOp(fake, 8, &ended[0]));
  executor.Submit(LaunchOp(fake, 16, &ended[1]));
  for (auto& e : ended) e.WaitForNotification();
  const absl::Status later = RunOp(
      executor, [](CollectiveExecutor::Context&) { return absl::OkStatus(); });
  EXPECT_EQ(later.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(later.message().find("an earlier collective"),
            absl::string_view::npos);
  {
    absl::MutexLock lock(&fake.mu);
    // No finish ran: the regions may still be written.
    EXPECT_EQ(fake.log,
              (std::vector<std::string>{"body 8", "start 8", "body 16",
                                        "start 16", "done 8 DEADLINE_EXCEEDED",
                                        "done 16 DEADLINE_EXCEEDED"}));
  }
  // The held collectives end after all: their callbacks find their state.
  fake.ReleaseOldest();
  fake.ReleaseOldest();
}

TEST(CollectiveExecutor, ALaunchIsTheBodysLastCollective) {
  FakeApi fake;
  CollectiveExecutor executor(&fake.api, nullptr, SmallOptions());
  const absl::Status status =
      RunOp(executor, [](CollectiveExecutor::Context& c) {
        absl::Span<std::byte> s = c.Scratch(8).value();
        EXPECT_TRUE(c.Launch(STARLING_ALL_REDUCE, s, STARLING_FLOAT32,
                             STARLING_SUM, 0, nullptr)
                        .ok());
        return c.Collective(STARLING_ALL_REDUCE, s, STARLING_FLOAT32);
      });
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("after it launched"),
            absl::string_view::npos);
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
