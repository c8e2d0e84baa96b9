#include "server/coordinator/state_persister.h"

#include <utility>

#include "server/base/logging.h"

namespace starling {
namespace coordinator {

StatePersister::StatePersister(
    std::unique_ptr<StateStore> store,
    std::function<proto::CoordinatorState()> snapshot,
    std::function<void(const absl::Status&)> on_written)
    : store_(std::move(store)),
      snapshot_(std::move(snapshot)),
      on_written_(std::move(on_written)) {
  thread_ = std::thread([this] { Loop(); });
}

StatePersister::~StatePersister() { Stop(); }

void StatePersister::Changed() {
  absl::MutexLock lock(&mu_);
  ++announced_;
}

void StatePersister::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

absl::Status StatePersister::Flush(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  const uint64_t wanted = announced_;
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return done_ >= wanted;
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&done), deadline)) {
    return absl::DeadlineExceededError(
        "the coordinator's record was not written in time: " + where());
  }
  return error_;
}

void StatePersister::Loop() {
  absl::Status reported;  // the last error logged
  while (true) {
    uint64_t version = 0;
    {
      absl::MutexLock lock(&mu_);
      auto work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return announced_ > done_ || stop_;
      };
      mu_.Await(absl::Condition(&work));
      if (announced_ == done_) return;  // stopping, nothing to write
      version = announced_;
    }
    // No lock of ours held: the snapshot takes the coordinator's.
    const absl::Status written = store_->Write(snapshot_());
    if (!written.ok() && written.ToString() != reported.ToString()) {
      STARLING_LOG(ERROR) << "the coordinator could not record its job: "
                          << written
                          << " (a restart would not resume from this record)";
    } else if (written.ok() && !reported.ok()) {
      STARLING_LOG(INFO) << "the coordinator records its job in "
                         << store_->where() << " again";
    }
    reported = written;
    if (on_written_ != nullptr) on_written_(written);
    absl::MutexLock lock(&mu_);
    done_ = version;
    error_ = written;
    if (stop_ && announced_ == done_) return;
  }
}

}  // namespace coordinator
}  // namespace starling
