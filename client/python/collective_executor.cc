#include "client/python/collective_executor.h"

#include <algorithm>
#include <exception>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace starling {
namespace torch_backend {
namespace {

const char* KindName(StarlingCollectiveKind kind) {
  switch (kind) {
    case STARLING_ALL_REDUCE:
      return "all-reduce";
    case STARLING_BROADCAST:
      return "broadcast";
    case STARLING_ALL_GATHER:
      return "all-gather";
    case STARLING_REDUCE_SCATTER:
      return "reduce-scatter";
    case STARLING_BARRIER:
      return "barrier";
  }
  return "collective";
}

}  // namespace

struct CollectiveExecutor::Shared {
  absl::Mutex mu;
  std::deque<Op> queue ABSL_GUARDED_BY(mu);
  bool stopping ABSL_GUARDED_BY(mu) = false;
  // The collective the executor thread waits for besides the queue.
  const Pending* awaited ABSL_GUARDED_BY(mu) = nullptr;

  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
};

struct CollectiveExecutor::Pending {
  std::shared_ptr<Shared> shared;
  // Guarded by shared->mu.
  bool done = false;
  absl::Status status;
};

bool CollectiveExecutor::Shared::HasWork() const {
  return stopping || !queue.empty() || (awaited != nullptr && awaited->done);
}

absl::StatusOr<absl::Span<std::byte>> CollectiveExecutor::Context::Scratch(
    size_t bytes) {
  return executor_.Scratch(bytes);
}

absl::Status CollectiveExecutor::Context::Collective(
    StarlingCollectiveKind kind, absl::Span<std::byte> data,
    StarlingDataType type, StarlingReduceOp op, int root) {
  return executor_.Collective(kind, data, type, op, root);
}

absl::Status CollectiveExecutor::Context::Launch(
    StarlingCollectiveKind kind, absl::Span<std::byte> data,
    StarlingDataType type, StarlingReduceOp op, int root,
    std::function<absl::Status()> finish) {
  return executor_.Launch(kind, data, type, op, root, std::move(finish));
}

int CollectiveExecutor::Context::total_workers() const {
  return executor_.api_->total_workers(executor_.api_->client);
}

int CollectiveExecutor::Context::slot() const {
  return executor_.api_->slot(executor_.api_->client);
}

CollectiveExecutor::CollectiveExecutor(const StarlingCollectiveApi* api,
                                       std::shared_ptr<void> api_owner,
                                       Options options)
    : api_(api),
      api_owner_(std::move(api_owner)),
      options_(options),
      shared_(std::make_shared<Shared>()) {
  thread_ = std::thread([this] { Loop(); });
}

CollectiveExecutor::~CollectiveExecutor() {
  Shutdown();
  // The last use of api_ is over: its owner may go (after the thread, which
  // used it, and before nothing else).
  api_owner_.reset();
}

void CollectiveExecutor::Submit(Op op) {
  {
    absl::MutexLock lock(&shared_->mu);
    if (!shared_->stopping) {
      shared_->queue.push_back(std::move(op));
      return;
    }
  }
  op.done(absl::FailedPreconditionError(
      absl::StrCat("starling ", op.name,
                   ": the Starling session was shut down (starling.shutdown() "
                   "or the process is exiting)")));
}

void CollectiveExecutor::Shutdown() {
  std::deque<Op> refused;
  {
    absl::MutexLock lock(&shared_->mu);
    shared_->stopping = true;
    refused.swap(shared_->queue);
  }
  for (Op& op : refused) {
    op.done(absl::FailedPreconditionError(
        absl::StrCat("starling ", op.name,
                     ": not started: the Starling session was shut down "
                     "(starling.shutdown() or the process is exiting)")));
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) {
    thread_.join();
  }
}

void CollectiveExecutor::Loop() {
  while (true) {
    std::optional<Op> op;
    {
      absl::MutexLock lock(&shared_->mu);
      // New ops first: launching the next collective keeps the daemons
      // busy; ending the oldest (copying out) can follow.
      if (in_flight_.empty()) {
        shared_->awaited = nullptr;
        shared_->mu.Await(absl::Condition(shared_.get(), &Shared::HasWork));
      } else {
        shared_->awaited = in_flight_.front().pending.get();
        shared_->mu.AwaitWithDeadline(
            absl::Condition(shared_.get(), &Shared::HasWork),
            in_flight_.front().deadline);
        shared_->awaited = nullptr;
      }
      if (!shared_->queue.empty()) {
        op = std::move(shared_->queue.front());
        shared_->queue.pop_front();
      } else if (in_flight_.empty()) {
        return;  // stopping, and nothing is left
      }
    }
    if (op.has_value()) {
      Run(*op);
    } else {
      FinishOldest();
    }
  }
}

absl::Status CollectiveExecutor::StickyError(const std::string& name,
                                             absl::string_view how) const {
  return absl::Status(
      sticky_.code(),
      absl::StrCat("starling ", name, ": ", how,
                   "an earlier collective did not complete and this "
                   "process's Starling collectives cannot go on: ",
                   sticky_.message()));
}

int CollectiveExecutor::MaxInFlight() const {
  return std::max(options_.max_in_flight, 1);
}

void CollectiveExecutor::Run(Op& op) {
  if (!sticky_.ok()) {
    op.done(StickyError(op.name, "not started, "));
    return;
  }
  if (!in_flight_.empty() && MustWaitForInFlight(op.touches)) {
    // Its body would read (or write) what an op in flight still writes.
    DrainInFlight();
  }
  Context context(*this);
  body_region_ = -1;
  body_launch_ = InFlight();
  absl::Status status;
  // The bodies call into PyTorch, whose errors are exceptions: this is
  // where they become a status (Starling code does not throw).
  try {
    status = op.body(context);
  } catch (const std::exception& e) {
    status = absl::InternalError(e.what());
  }
  InFlight launched = std::move(body_launch_);
  body_launch_ = InFlight();
  body_region_ = -1;
  if (launched.pending == nullptr) {
    op.done(status);
    return;
  }
  launched.name = std::move(op.name);
  launched.done = std::move(op.done);
  launched.touches = std::move(op.touches);
  launched.body_status = std::move(status);
  in_flight_.push_back(std::move(launched));
}

bool CollectiveExecutor::MustWaitForInFlight(
    const std::vector<std::pair<uintptr_t, uintptr_t>>& touches) const {
  if (touches.empty()) return true;  // not known
  for (const InFlight& other : in_flight_) {
    if (other.touches.empty()) return true;
    for (const auto& [begin, end] : touches) {
      for (const auto& [other_begin, other_end] : other.touches) {
        if (begin < other_end && other_begin < end) return true;
      }
    }
  }
  return false;
}

void CollectiveExecutor::FinishOldest() {
  InFlight oldest = std::move(in_flight_.front());
  in_flight_.pop_front();
  absl::Status status =
      Await(oldest.pending, oldest.kind, oldest.bytes, oldest.deadline);
  const bool timed_out = !sticky_.ok();
  if (oldest.region >= 0 && !timed_out) regions_[oldest.region].held = false;
  if (status.ok()) status = oldest.body_status;
  if (status.ok() && oldest.finish) {
    try {
      status = oldest.finish();
    } catch (const std::exception& e) {
      status = absl::InternalError(e.what());
    }
  }
  oldest.done(status);
  if (timed_out) {
    // What is still in flight cannot be known either: its regions stay
    // held for good.
    while (!in_flight_.empty()) {
      InFlight next = std::move(in_flight_.front());
      in_flight_.pop_front();
      next.done(StickyError(next.name, ""));
    }
  } else if (!in_flight_.empty()) {
    // The next one's time counts from now at the latest: it waited behind
    // this one at the daemons.
    InFlight& next = in_flight_.front();
    next.deadline =
        std::max(next.deadline, absl::Now() + options_.collective_timeout);
  }
}

void CollectiveExecutor::DrainInFlight() {
  while (!in_flight_.empty()) FinishOldest();
}

absl::StatusOr<absl::Span<std::byte>> CollectiveExecutor::Scratch(
    size_t bytes) {
  if (body_launch_.pending != nullptr) {
    return absl::FailedPreconditionError(
        "an op's body asked for scratch memory after it launched its "
        "collective");
  }
  if (body_region_ < 0) {
    // A region no op in flight holds; the oldest ends first when every
    // one is held.
    for (size_t i = 0; i < regions_.size(); ++i) {
      if (!regions_[i].held) {
        body_region_ = static_cast<int>(i);
        break;
      }
    }
    if (body_region_ < 0) {
      if (static_cast<int>(regions_.size()) < MaxInFlight()) {
        regions_.emplace_back();
        body_region_ = static_cast<int>(regions_.size()) - 1;
      } else if (!in_flight_.empty()) {
        const int freed = in_flight_.front().region;
        FinishOldest();
        if (freed >= 0 && !regions_[freed].held) body_region_ = freed;
      }
    }
    if (body_region_ < 0) {
      // Every region is held for good (collectives that timed out): a
      // new one.
      regions_.emplace_back();
      body_region_ = static_cast<int>(regions_.size()) - 1;
    }
  }
  Region* region = &regions_[body_region_];
  if (region->bytes < bytes || region->data == nullptr) {
    char error[512] = {0};
    const size_t grown =
        std::max({bytes, 2 * region->bytes, options_.min_scratch_bytes});
    void* memory = api_->allocate(api_->client, grown, error, sizeof(error));
    size_t got = grown;
    if (memory == nullptr && grown > bytes) {
      // The pool may still hold what is needed now.
      memory = api_->allocate(api_->client, bytes, error, sizeof(error));
      got = bytes;
    }
    if (memory == nullptr && !in_flight_.empty()) {
      // The regions of the ops in flight may serve once they end.
      DrainInFlight();
      for (size_t i = 0; i < regions_.size(); ++i) {
        if (!regions_[i].held && regions_[i].bytes >= bytes &&
            regions_[i].data != nullptr) {
          body_region_ = static_cast<int>(i);
          return absl::Span<std::byte>(regions_[i].data, bytes);
        }
      }
    }
    if (memory == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot stage ", bytes, " bytes in the worker's shared pool (", error,
          "); give the pool more room: starling.init(pool_bytes=...) or "
          "STARLING_POOL_BYTES (default 1 GiB; the torch backend keeps up "
          "to ",
          MaxInFlight(), " scratch regions of at least ",
          options_.min_scratch_bytes >> 20,
          " MiB, each grown to twice its size when an op needs more)"));
    }
    region = &regions_[body_region_];
    region->data = static_cast<std::byte*>(memory);
    region->bytes = got;
  }
  return absl::Span<std::byte>(region->data, bytes);
}

void CollectiveExecutor::OnCollectiveDone(void* arg, int code,
                                          const char* message) {
  std::unique_ptr<std::shared_ptr<Pending>> owner(
      static_cast<std::shared_ptr<Pending>*>(arg));
  Pending& pending = **owner;
  absl::MutexLock lock(&pending.shared->mu);
  pending.status = code == 0 ? absl::OkStatus()
                             : absl::Status(static_cast<absl::StatusCode>(code),
                                            message == nullptr ? "" : message);
  pending.done = true;
}

std::shared_ptr<CollectiveExecutor::Pending> CollectiveExecutor::Start(
    StarlingCollectiveKind kind, absl::Span<std::byte> data,
    StarlingDataType type, StarlingReduceOp op, int root) {
  auto pending = std::make_shared<Pending>();
  pending->shared = shared_;
  // Owned by the done callback from here on.
  auto* arg = new std::shared_ptr<Pending>(pending);
  api_->start(api_->client, kind, data.data(), data.size(), type, op, root,
              &CollectiveExecutor::OnCollectiveDone, arg);
  return pending;
}

absl::Status CollectiveExecutor::Await(const std::shared_ptr<Pending>& pending,
                                       StarlingCollectiveKind kind,
                                       size_t bytes, absl::Time deadline) {
  {
    absl::MutexLock lock(&shared_->mu);
    if (shared_->mu.AwaitWithDeadline(absl::Condition(&pending->done),
                                      deadline)) {
      return pending->status;
    }
  }
  sticky_ = absl::DeadlineExceededError(absl::StrCat(
      "the ", KindName(kind), " of ", bytes, " bytes did not complete within ",
      absl::FormatDuration(options_.collective_timeout),
      " (STARLING_TIMEOUT plus 2 s): a worker of the job did not take "
      "part (it exited, hangs, or issued other collectives) or a daemon "
      "is gone; the daemons' logs name who"));
  return sticky_;
}

absl::Status CollectiveExecutor::Collective(StarlingCollectiveKind kind,
                                            absl::Span<std::byte> data,
                                            StarlingDataType type,
                                            StarlingReduceOp op, int root) {
  if (body_launch_.pending != nullptr) {
    return absl::FailedPreconditionError(
        "an op's body ran a collective after it launched one");
  }
  // Ops end in submission order.
  DrainInFlight();
  if (!sticky_.ok()) return sticky_;
  std::shared_ptr<Pending> pending = Start(kind, data, type, op, root);
  const absl::Status status = Await(pending, kind, data.size(),
                                    absl::Now() + options_.collective_timeout);
  if (!sticky_.ok() && body_region_ >= 0) regions_[body_region_].held = true;
  return status;
}

absl::Status CollectiveExecutor::Launch(StarlingCollectiveKind kind,
                                        absl::Span<std::byte> data,
                                        StarlingDataType type,
                                        StarlingReduceOp op, int root,
                                        std::function<absl::Status()> finish) {
  if (body_launch_.pending != nullptr) {
    return absl::FailedPreconditionError(
        "an op's body launched a second collective");
  }
  while (static_cast<int>(in_flight_.size()) >= MaxInFlight()) {
    FinishOldest();
  }
  if (!sticky_.ok()) return sticky_;
  body_launch_.kind = kind;
  body_launch_.bytes = data.size();
  body_launch_.finish = std::move(finish);
  body_launch_.region = body_region_;
  if (body_region_ >= 0) regions_[body_region_].held = true;
  body_launch_.deadline = absl::Now() + options_.collective_timeout;
  body_launch_.pending = Start(kind, data, type, op, root);
  return absl::OkStatus();
}

}  // namespace torch_backend
}  // namespace starling
