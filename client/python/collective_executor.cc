#include "client/python/collective_executor.h"

#include <algorithm>
#include <exception>
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

struct CollectiveExecutor::Pending {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
};

absl::StatusOr<absl::Span<std::byte>> CollectiveExecutor::Context::Scratch(
    size_t bytes) {
  return executor_.Scratch(bytes);
}

absl::Status CollectiveExecutor::Context::Collective(
    StarlingCollectiveKind kind, absl::Span<std::byte> data,
    StarlingDataType type, StarlingReduceOp op, int root) {
  return executor_.Collective(kind, data, type, op, root);
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
    : api_(api), api_owner_(std::move(api_owner)), options_(options) {
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
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      queue_.push_back(std::move(op));
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
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    refused.swap(queue_);
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

bool CollectiveExecutor::HasWork() const {
  return stopping_ || !queue_.empty();
}

void CollectiveExecutor::Loop() {
  Context context(*this);
  while (true) {
    Op op;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &CollectiveExecutor::HasWork));
      if (queue_.empty()) return;  // stopping
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    absl::Status status = sticky_;
    if (status.ok()) {
      // The bodies call into PyTorch, whose errors are exceptions: this is
      // where they become a status (Starling code does not throw).
      try {
        status = op.body(context);
      } catch (const std::exception& e) {
        status = absl::InternalError(e.what());
      }
    } else {
      status = absl::Status(
          status.code(),
          absl::StrCat("starling ", op.name,
                       ": not started, an earlier collective did not "
                       "complete and this process's Starling collectives "
                       "cannot go on: ",
                       status.message()));
    }
    op.done(status);
  }
}

absl::StatusOr<absl::Span<std::byte>> CollectiveExecutor::Scratch(
    size_t bytes) {
  if (scratch_bytes_ < bytes || scratch_ == nullptr) {
    char error[512] = {0};
    const size_t grown =
        std::max({bytes, 2 * scratch_bytes_, options_.min_scratch_bytes});
    void* region = api_->allocate(api_->client, grown, error, sizeof(error));
    if (region == nullptr && grown > bytes) {
      // The pool may still hold what is needed now.
      region = api_->allocate(api_->client, bytes, error, sizeof(error));
      if (region != nullptr) scratch_bytes_ = bytes;
    } else if (region != nullptr) {
      scratch_bytes_ = grown;
    }
    if (region == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot stage ", bytes, " bytes in the worker's shared pool (", error,
          "); give the pool more room: starling.init(pool_bytes=...) or "
          "STARLING_POOL_BYTES (default 1 GiB; the torch backend keeps one "
          "scratch region of at least ",
          options_.min_scratch_bytes >> 20,
          " MiB, grown to twice its size when an op needs more)"));
    }
    scratch_ = static_cast<std::byte*>(region);
  }
  return absl::Span<std::byte>(scratch_, bytes);
}

void CollectiveExecutor::OnCollectiveDone(void* arg, int code,
                                          const char* message) {
  std::unique_ptr<std::shared_ptr<Pending>> owner(
      static_cast<std::shared_ptr<Pending>*>(arg));
  Pending& pending = **owner;
  absl::MutexLock lock(&pending.mu);
  pending.status = code == 0 ? absl::OkStatus()
                             : absl::Status(static_cast<absl::StatusCode>(code),
                                            message == nullptr ? "" : message);
  pending.done = true;
}

absl::Status CollectiveExecutor::Collective(StarlingCollectiveKind kind,
                                            absl::Span<std::byte> data,
                                            StarlingDataType type,
                                            StarlingReduceOp op, int root) {
  auto pending = std::make_shared<Pending>();
  // Owned by the done callback from here on.
  auto* arg = new std::shared_ptr<Pending>(pending);
  api_->start(api_->client, kind, data.data(), data.size(), type, op, root,
              &CollectiveExecutor::OnCollectiveDone, arg);
  absl::MutexLock lock(&pending->mu);
  if (!pending->mu.AwaitWithTimeout(absl::Condition(&pending->done),
                                    options_.collective_timeout)) {
    sticky_ = absl::DeadlineExceededError(absl::StrCat(
        "the ", KindName(kind), " of ", data.size(),
        " bytes did not complete within ",
        absl::FormatDuration(options_.collective_timeout),
        " (STARLING_TIMEOUT plus 2 s): a worker of the job did not take "
        "part (it exited, hangs, or issued other collectives) or a daemon "
        "is gone; the daemons' logs name who"));
    return sticky_;
  }
  return pending->status;
}

}  // namespace torch_backend
}  // namespace starling
