#include "server/transport/frame_sender.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/logging.h"

namespace starling {
namespace transport {
namespace {

// iovecs gathered per WriteSome(): two per frame, so up to 32 frames.
constexpr int kMaxIovecs = 64;

}  // namespace

void WriteTracker::Begin(uint32_t seq, Completion* done, int parts) {
  absl::MutexLock lock(&mu_);
  Entry& entry = writes_[seq];
  entry.done = done;
  entry.remaining = parts;
}

void WriteTracker::PartDone(uint32_t seq, const absl::Status& status) {
  Completion* done = nullptr;
  absl::Status result;
  {
    absl::MutexLock lock(&mu_);
    auto it = writes_.find(seq);
    STARLING_CHECK(it != writes_.end()) << "unknown striped write " << seq;
    Entry& entry = it->second;
    if (!status.ok() && entry.status.ok()) entry.status = status;
    if (--entry.remaining > 0) return;
    done = entry.done;
    result = std::move(entry.status);
    writes_.erase(it);
  }
  done->Finish(result);
}

FrameSender::FrameSender(ByteChannel* channel, WriteTracker* tracker)
    : channel_(channel), tracker_(tracker) {}

FrameSender::~FrameSender() {
  absl::MutexLock lock(&mu_);
  STARLING_CHECK(queue_.empty())
      << "frame sender destroyed with " << queue_.size() << " queued frames";
}

void FrameSender::Complete(const Finished& write, const absl::Status& status) {
  if (write.part_count > 1) {
    tracker_->PartDone(write.seq, status);
  } else {
    write.done->Finish(status);
  }
}

void FrameSender::CompleteAll(const FinishedList& writes,
                              const absl::Status& status) {
  for (const Finished& write : writes) Complete(write, status);
}

FrameSender::Item FrameSender::WriteItem(const FrameHeader& header,
                                         const std::byte* payload,
                                         Completion* done) {
  Item item;
  EncodeFrameHeader(header, item.header);
  item.payload = payload;
  item.payload_bytes = header.length;
  item.done = done;
  item.seq = header.seq;
  item.part_count = header.part_count;
  return item;
}

FrameSender::Item FrameSender::OwnedItem(const FrameHeader& header,
                                         std::vector<std::byte> payload) {
  Item item;
  EncodeFrameHeader(header, item.header);
  item.owned = std::move(payload);
  item.payload = item.owned.data();
  item.payload_bytes = item.owned.size();
  return item;
}

absl::Status FrameSender::PostWrite(const FrameHeader& header,
                                    const std::byte* payload,
                                    Completion* done) {
  FinishedList sent;
  absl::Status channel_error;
  bool failed = false;
  absl::Status fail_status;
  {
    absl::MutexLock lock(&mu_);
    if (failed_) {
      failed = true;
      fail_status = fail_status_;
    } else {
      Item item = WriteItem(header, payload, done);
      channel_error = Enqueue(absl::MakeSpan(&item, 1), &sent);
    }
  }
  if (failed) {
    Complete(Finished{done, header.seq, header.part_count}, fail_status);
    return absl::OkStatus();
  }
  // Frames the channel took whole stay sent even if it failed afterwards;
  // the caller fails the rest through Fail().
  CompleteAll(sent, absl::OkStatus());
  return channel_error;
}

absl::Status FrameSender::PostFrame(const FrameHeader& header,
                                    std::vector<std::byte> payload) {
  FinishedList sent;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (failed_) return fail_status_;
    Item item = OwnedItem(header, std::move(payload));
    status = Enqueue(absl::MakeSpan(&item, 1), &sent);
  }
  CompleteAll(sent, absl::OkStatus());
  return status;
}

absl::Status FrameSender::PostFrameThenWrite(const FrameHeader& frame,
                                             std::vector<std::byte> payload,
                                             const FrameHeader& header,
                                             const std::byte* data,
                                             Completion* done) {
  FinishedList sent;
  absl::Status status;
  bool failed = false;
  {
    absl::MutexLock lock(&mu_);
    failed = failed_;
    if (failed) {
      status = fail_status_;
    } else {
      Item items[2] = {OwnedItem(frame, std::move(payload)),
                       WriteItem(header, data, done)};
      status = Enqueue(absl::MakeSpan(items), &sent);
    }
  }
  if (failed) {
    Complete(Finished{done, header.seq, header.part_count}, status);
    return status;
  }
  CompleteAll(sent, absl::OkStatus());
  return status;
}

absl::Status FrameSender::Enqueue(absl::Span<Item> items, FinishedList* sent) {
  const bool was_empty = queue_.empty();
  for (Item& item : items) queue_.push_back(std::move(item));
  // With frames already queued the channel is full (or the I/O thread is
  // about to flush): a send now would only return EAGAIN.
  if (!was_empty) return absl::OkStatus();
  return FlushLocked(sent);
}

absl::Status FrameSender::Flush() {
  FinishedList sent;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (failed_) return absl::OkStatus();
    status = FlushLocked(&sent);
  }
  CompleteAll(sent, absl::OkStatus());
  return status;
}

absl::Status FrameSender::FlushLocked(FinishedList* sent) {
  while (!queue_.empty()) {
    struct iovec iov[kMaxIovecs];
    int count = 0;
    size_t skip = head_sent_bytes_;
    size_t wanted = 0;
    for (auto it = queue_.begin();
         it != queue_.end() && count + 2 <= kMaxIovecs; ++it) {
      if (skip < kFrameHeaderBytes) {
        iov[count++] = {it->header + skip, kFrameHeaderBytes - skip};
        wanted += kFrameHeaderBytes - skip;
        skip = 0;
      } else {
        skip -= kFrameHeaderBytes;
      }
      if (it->payload_bytes > 0) {
        // The payload is only read; iovec wants a non-const pointer.
        iov[count++] = {const_cast<std::byte*>(it->payload) + skip,
                        it->payload_bytes - skip};
        wanted += it->payload_bytes - skip;
      }
      skip = 0;
    }
    absl::StatusOr<size_t> taken = channel_->WriteSome(iov, count);
    if (!taken.ok()) return taken.status();
    size_t bytes = *taken + head_sent_bytes_;
    while (!queue_.empty()) {
      const Item& head = queue_.front();
      const size_t total = kFrameHeaderBytes + head.payload_bytes;
      if (bytes < total) break;
      bytes -= total;
      if (head.done != nullptr) {
        sent->push_back(Finished{head.done, head.seq, head.part_count});
      }
      queue_.pop_front();
    }
    head_sent_bytes_ = bytes;
    if (*taken < wanted) {
      if (!want_writable_) {
        want_writable_ = true;
        channel_->WantWritable(true);
      }
      return absl::OkStatus();
    }
  }
  if (want_writable_) {
    want_writable_ = false;
    channel_->WantWritable(false);
  }
  if (shutdown_when_flushed_) channel_->Shutdown(/*graceful=*/true);
  return absl::OkStatus();
}

void FrameSender::Fail(const absl::Status& why,
                       const std::string& error_message) {
  FinishedList failed;
  {
    absl::MutexLock lock(&mu_);
    if (failed_) return;
    failed_ = true;
    fail_status_ = why;
    bool graceful = false;
    // An ERROR frame can only follow whole frames on the wire.
    if (!error_message.empty() && head_sent_bytes_ == 0) {
      const size_t length =
          std::min(error_message.size(), kMaxErrorMessageBytes);
      FrameHeader header;
      header.type = FrameType::kError;
      header.imm = static_cast<uint32_t>(why.code());
      header.length = length;
      Item item;
      EncodeFrameHeader(header, item.header);
      struct iovec iov[2] = {{item.header, kFrameHeaderBytes},
                             {const_cast<char*>(error_message.data()), length}};
      absl::StatusOr<size_t> taken = channel_->WriteSome(iov, 2);
      graceful = taken.ok() && *taken == kFrameHeaderBytes + length;
    }
    for (const Item& item : queue_) {
      if (item.done != nullptr) {
        failed.push_back(Finished{item.done, item.seq, item.part_count});
      }
    }
    queue_.clear();
    head_sent_bytes_ = 0;
    channel_->Shutdown(graceful);
  }
  CompleteAll(failed, why);
}

void FrameSender::ShutdownWhenFlushed() {
  absl::MutexLock lock(&mu_);
  if (failed_) return;
  shutdown_when_flushed_ = true;
  if (queue_.empty()) channel_->Shutdown(/*graceful=*/true);
}

bool FrameSender::Idle() const {
  absl::MutexLock lock(&mu_);
  return queue_.empty();
}

bool FrameSender::failed() const {
  absl::MutexLock lock(&mu_);
  return failed_;
}

}  // namespace transport
}  // namespace starling
