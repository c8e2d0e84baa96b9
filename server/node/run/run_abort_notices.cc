#include "server/node/run/run_abort_notices.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "server/base/logging.h"

namespace starling {
namespace node {
namespace {

// How often the listener looks for peers' failure notices.
constexpr absl::Duration kAbortPollInterval = absl::Milliseconds(20);

}  // namespace

absl::Status NameLostPeers(const absl::Status& why,
                           const transport::Transport& transport) {
  if (why.ok()) return why;
  std::string lost;
  for (int peer = 0; peer < transport.size(); ++peer) {
    if (peer == transport.rank()) continue;
    const absl::Status peer_status = transport.PeerStatus(peer);
    if (!peer_status.ok() &&
        !absl::StrContains(why.message(), transport.PeerName(peer))) {
      absl::StrAppend(&lost, lost.empty() ? "" : "; ", transport.PeerName(peer),
                      ": ", peer_status.message());
    }
  }
  if (lost.empty()) return why;
  return absl::Status(why.code(),
                      absl::StrCat(why.message(), " [peers lost: ", lost, "]"));
}

RunAbortNotices::RunAbortNotices(transport::Transport* transport,
                                 OnAbort on_abort)
    : transport_(transport), on_abort_(std::move(on_abort)) {}

RunAbortNotices::~RunAbortNotices() { Stop(); }

void RunAbortNotices::Start() {
  if (transport_->size() > 1) {
    listener_ = std::thread([this] { Listen(); });
  }
}

void RunAbortNotices::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (listener_.joinable()) listener_.join();
}

void RunAbortNotices::Broadcast(const proto::RunAbort& abort) {
  const std::string bytes = abort.SerializeAsString();
  const absl::Span<const std::byte> message(
      reinterpret_cast<const std::byte*>(bytes.data()), bytes.size());
  for (int peer = 0; peer < transport_->size(); ++peer) {
    if (peer == transport_->rank() || !transport_->PeerStatus(peer).ok()) {
      continue;
    }
    // Best effort: the coordinator fans the failure out too.
    transport_->SendControl(peer, kRunAbortTag, message).IgnoreError();
  }
}

void RunAbortNotices::Listen() {
  // Polls every peer's abort tag without blocking; a notice fails the run
  // here too, naming the rank where it failed and why.
  while (!stop_.WaitForNotificationWithTimeout(kAbortPollInterval)) {
    for (int peer = 0; peer < transport_->size(); ++peer) {
      if (peer == transport_->rank()) continue;
      absl::StatusOr<std::vector<std::byte>> got =
          transport_->RecvControl(peer, kRunAbortTag, absl::Now());
      if (!got.ok()) continue;
      proto::RunAbort abort;
      if (!abort.ParseFromArray(got->data(), static_cast<int>(got->size()))) {
        STARLING_LOG(WARNING) << "unparsable run failure notice from "
                              << transport_->PeerName(peer);
        continue;
      }
      on_abort_(abort.run_id(),
                absl::Status(absl::StatusCode::kAborted,
                             absl::StrCat(transport_->PeerName(peer),
                                          " failed the run: ", abort.error())));
    }
  }
}

}  // namespace node
}  // namespace starling
