#include "server/node/telemetry/metered_transport.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace starling {
namespace node {

absl::StatusOr<MeteredTransport::Counters> MeteredTransport::Register(
    metrics::MetricsRegistry* registry) {
  absl::StatusOr<metrics::CounterFamily*> sent = registry->AddCounter(
      "starling_transport_sent_bytes_total",
      "Bytes this daemon sent to each peer on the data plane (writes and "
      "control messages)",
      {"peer"});
  if (!sent.ok()) return sent.status();
  absl::StatusOr<metrics::CounterFamily*> received = registry->AddCounter(
      "starling_transport_received_bytes_total",
      "Bytes this daemon received from each peer on the data plane (writes "
      "consumed and control messages)",
      {"peer"});
  if (!received.ok()) return received.status();
  return Counters{*sent, *received};
}

std::unique_ptr<MeteredTransport> MeteredTransport::Create(
    std::unique_ptr<transport::Transport> inner, const Counters& counters) {
  std::vector<metrics::Counter*> sent_by_peer(inner->size(), nullptr);
  std::vector<metrics::Counter*> received_by_peer(inner->size(), nullptr);
  for (int peer = 0; peer < inner->size(); ++peer) {
    if (peer == inner->rank()) continue;
    sent_by_peer[peer] = counters.sent->WithLabels({absl::StrCat(peer)});
    received_by_peer[peer] =
        counters.received->WithLabels({absl::StrCat(peer)});
  }
  return std::unique_ptr<MeteredTransport>(new MeteredTransport(
      std::move(inner), std::move(sent_by_peer), std::move(received_by_peer)));
}

MeteredTransport::MeteredTransport(std::unique_ptr<transport::Transport> inner,
                                   std::vector<metrics::Counter*> sent,
                                   std::vector<metrics::Counter*> received)
    : ForwardingTransport(inner.get()),
      inner_(std::move(inner)),
      sent_(std::move(sent)),
      received_(std::move(received)) {}

void MeteredTransport::CountSent(int peer, size_t bytes) {
  if (peer >= 0 && peer < static_cast<int>(sent_.size()) &&
      sent_[peer] != nullptr) {
    sent_[peer]->Increment(static_cast<double>(bytes));
  }
}

void MeteredTransport::CountReceived(int peer, size_t bytes) {
  if (peer >= 0 && peer < static_cast<int>(received_.size()) &&
      received_[peer] != nullptr) {
    received_[peer]->Increment(static_cast<double>(bytes));
  }
}

absl::Status MeteredTransport::RegisterRegion(transport::RegionId id,
                                              absl::Span<std::byte> memory) {
  absl::Status status = inner_->RegisterRegion(id, memory);
  if (status.ok()) {
    absl::MutexLock lock(&regions_mu_);
    region_bytes_[id] = memory.size();
    registered_bytes_.fetch_add(memory.size(), std::memory_order_relaxed);
  }
  return status;
}

absl::Status MeteredTransport::DeregisterRegion(transport::RegionId id) {
  absl::Status status = inner_->DeregisterRegion(id);
  absl::MutexLock lock(&regions_mu_);
  if (auto it = region_bytes_.find(id); it != region_bytes_.end()) {
    registered_bytes_.fetch_sub(it->second, std::memory_order_relaxed);
    region_bytes_.erase(it);
  }
  return status;
}

void MeteredTransport::Write(int peer, absl::Span<const std::byte> data,
                             transport::RegionId remote,
                             uint64_t remote_offset_bytes, uint32_t imm,
                             transport::Completion* done) {
  CountSent(peer, data.size());
  inner_->Write(peer, data, remote, remote_offset_bytes, imm, done);
}

absl::StatusOr<transport::WriteNotice> MeteredTransport::WaitForWrite(
    const transport::WriteMatch& match, absl::Time deadline) {
  absl::StatusOr<transport::WriteNotice> notice =
      inner_->WaitForWrite(match, deadline);
  if (notice.ok()) CountReceived(notice->peer, notice->length_bytes);
  return notice;
}

absl::Status MeteredTransport::SendControl(
    int peer, uint32_t tag, absl::Span<const std::byte> message) {
  absl::Status status = inner_->SendControl(peer, tag, message);
  if (status.ok()) CountSent(peer, message.size());
  return status;
}

absl::Status MeteredTransport::SendControlThenWrite(
    int peer, uint32_t tag, absl::Span<const std::byte> message,
    absl::Span<const std::byte> data, transport::RegionId remote,
    uint64_t remote_offset_bytes, uint32_t imm, transport::Completion* done) {
  CountSent(peer, data.size());
  absl::Status status = inner_->SendControlThenWrite(
      peer, tag, message, data, remote, remote_offset_bytes, imm, done);
  if (status.ok()) CountSent(peer, message.size());
  return status;
}

absl::StatusOr<std::vector<std::byte>> MeteredTransport::RecvControl(
    int peer, uint32_t tag, absl::Time deadline) {
  absl::StatusOr<std::vector<std::byte>> message =
      inner_->RecvControl(peer, tag, deadline);
  if (message.ok()) CountReceived(peer, message->size());
  return message;
}

absl::StatusOr<std::optional<std::vector<std::byte>>>
MeteredTransport::TryRecvControl(int peer, uint32_t tag) {
  absl::StatusOr<std::optional<std::vector<std::byte>>> message =
      inner_->TryRecvControl(peer, tag);
  if (message.ok() && message->has_value()) {
    CountReceived(peer, (*message)->size());
  }
  return message;
}

}  // namespace node
}  // namespace starling
