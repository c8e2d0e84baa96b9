#include "server/transport/frame_receiver.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace starling {
namespace transport {
namespace {

// Staging buffer size. Small frames (headers, control messages, small
// writes) are read many at a time through it.
constexpr size_t kStagingBytes = 64 * 1024;

// Payload bytes still to come at or above which they are read straight into
// the destination instead of through the staging buffer.
constexpr size_t kDirectReadBytes = 8 * 1024;

// Reads per Receive() call, so that one busy connection cannot starve the
// others served by the same thread.
constexpr int kMaxReadsPerCall = 16;

}  // namespace

FrameReceiver::FrameReceiver(int peer, const RankNamer& name, Inbox* inbox,
                             size_t max_control_bytes)
    : peer_(peer),
      name_(name),
      inbox_(inbox),
      max_control_bytes_(max_control_bytes),
      staging_(new uint8_t[kStagingBytes]) {}

FrameReceiver::~FrameReceiver() { Abandon(); }

FrameReceiver::Result FrameReceiver::Fail(absl::Status error,
                                          bool send_error) const {
  Result result;
  result.error = std::move(error);
  result.send_error = send_error;
  return result;
}

FrameReceiver::Result FrameReceiver::Vanished(absl::Status error) const {
  Result result = Fail(std::move(error), false);
  result.vanished = true;
  return result;
}

FrameReceiver::Result FrameReceiver::Receive(ByteSource* source) {
  Result result;
  if (paused_) {
    result.paused = true;
    return result;
  }
  int reads = 0;
  bool drained = false;
  while (true) {
    if (state_ == State::kPayload) {
      if (dst_ != nullptr && !Inbox::LandingValid(landing_)) {
        inbox_->DivertLanding(&landing_);
        dst_ = nullptr;
      }
      const size_t buffered = std::min<uint64_t>(end_ - start_, remaining_);
      if (buffered > 0) {
        if (dst_ != nullptr) {
          std::memcpy(dst_, staging_.get() + start_, buffered);
          dst_ += buffered;
        }
        start_ += buffered;
        remaining_ -= buffered;
      }
      if (remaining_ == 0) {
        result = FinishFrame();
        if (!result.error.ok()) return result;
        continue;
      }
      if (dst_ != nullptr && remaining_ >= kDirectReadBytes) {
        if (drained || reads >= kMaxReadsPerCall) break;
        // The payload goes straight to its destination; the staging buffer
        // catches what follows (just the next header after a big payload, so
        // that the next payload is read directly too).
        start_ = end_ = 0;
        const size_t tail =
            remaining_ >= kStagingBytes ? kFrameHeaderBytes : kStagingBytes;
        struct iovec iov[2] = {{dst_, remaining_}, {staging_.get(), tail}};
        absl::StatusOr<size_t> got = source->ReadSome(iov, 2);
        ++reads;
        if (!got.ok()) return Vanished(got.status());
        if (*got == 0) {
          drained = true;
          break;
        }
        const size_t to_payload = std::min<uint64_t>(*got, remaining_);
        dst_ += to_payload;
        remaining_ -= to_payload;
        end_ = *got - to_payload;
        if (*got < remaining_ + to_payload + tail) drained = true;
        continue;
      }
    } else if (end_ - start_ >= kFrameHeaderBytes) {
      absl::StatusOr<FrameHeader> header = DecodeFrameHeader(
          absl::MakeConstSpan(staging_.get() + start_, kFrameHeaderBytes));
      if (!header.ok()) {
        return Fail(
            absl::DataLossError(absl::StrCat("bad frame from ", name_(peer_),
                                             ": ", header.status().message())),
            true);
      }
      start_ += kFrameHeaderBytes;
      result = BeginFrame(*header);
      if (!result.error.ok() || result.paused) return result;
      continue;
    }
    // Refill the staging buffer.
    if (drained || reads >= kMaxReadsPerCall) break;
    if (start_ > 0) {
      std::memmove(staging_.get(), staging_.get() + start_, end_ - start_);
      end_ -= start_;
      start_ = 0;
    }
    struct iovec iov = {staging_.get() + end_, kStagingBytes - end_};
    absl::StatusOr<size_t> got = source->ReadSome(&iov, 1);
    ++reads;
    if (!got.ok()) return Vanished(got.status());
    end_ += *got;
    if (*got < iov.iov_len) drained = true;
  }
  result = Result();
  result.drained = drained;
  return result;
}

FrameReceiver::Result FrameReceiver::BeginFrame(const FrameHeader& header) {
  if (header.version != kProtocolVersion) {
    return Fail(absl::DataLossError(absl::StrCat(
                    FrameTypeName(header.type), " frame from ", name_(peer_),
                    " has protocol version ", header.version, ", expected ",
                    kProtocolVersion)),
                true);
  }
  header_ = header;
  remaining_ = header.length;
  switch (header.type) {
    case FrameType::kWrite:
      kind_ = Kind::kWrite;
      return StartWrite();
    case FrameType::kControl:
      if (header.length > max_control_bytes_) {
        return Fail(absl::DataLossError(absl::StrCat(
                        "control message of ", header.length, " bytes from ",
                        name_(peer_), " exceeds max_control_bytes ",
                        max_control_bytes_)),
                    true);
      }
      kind_ = Kind::kControl;
      break;
    case FrameType::kError:
      kind_ = Kind::kError;
      break;
    case FrameType::kGoodbye: {
      Result result;
      result.error = absl::UnavailableError(
          absl::StrCat(name_(peer_), " shut down (said goodbye)"));
      result.orderly = true;
      return result;
    }
    case FrameType::kHello:
    case FrameType::kChallenge:
    case FrameType::kProof:
    case FrameType::kWelcome:
      return Fail(absl::DataLossError(absl::StrCat(
                      "unexpected ", FrameTypeName(header.type), " from ",
                      name_(peer_), " after the handshake")),
                  true);
  }
  message_.assign(header.length, std::byte{0});
  dst_ = message_.data();
  state_ = State::kPayload;
  if (remaining_ == 0) return FinishFrame();
  return Result();
}

FrameReceiver::Result FrameReceiver::StartWrite() {
  bool must_wait = false;
  absl::Status status =
      inbox_->BeginWrite(peer_, header_, &landing_, &must_wait);
  if (!status.ok()) return Fail(std::move(status), true);
  if (must_wait) {
    paused_ = true;
    Result result;
    result.paused = true;
    return result;
  }
  paused_ = false;
  dst_ = landing_.dst;
  state_ = State::kPayload;
  if (remaining_ == 0) return FinishFrame();
  return Result();
}

FrameReceiver::Result FrameReceiver::Resume() {
  if (!paused_) return Result();
  return StartWrite();
}

FrameReceiver::Result FrameReceiver::FinishFrame() {
  state_ = State::kHeader;
  dst_ = nullptr;
  switch (kind_) {
    case Kind::kWrite: {
      absl::Status status = inbox_->EndWrite(peer_, &landing_);
      if (!status.ok()) return Fail(std::move(status), true);
      break;
    }
    case Kind::kControl:
      inbox_->DeliverControl(peer_, header_.imm, std::move(message_));
      message_.clear();
      break;
    case Kind::kError: {
      const std::string text(reinterpret_cast<const char*>(message_.data()),
                             message_.size());
      return Fail(absl::Status(ErrorFrameCode(header_.imm),
                               absl::StrCat(name_(peer_),
                                            " failed the connection: ", text)),
                  false);
    }
  }
  return Result();
}

void FrameReceiver::RecheckLanding() {
  if (state_ == State::kPayload && kind_ == Kind::kWrite && dst_ != nullptr &&
      !Inbox::LandingValid(landing_)) {
    inbox_->DivertLanding(&landing_);
    dst_ = nullptr;
  }
}

void FrameReceiver::Abandon() {
  if (state_ == State::kPayload && kind_ == Kind::kWrite) {
    inbox_->AbandonWrite(&landing_);
  }
  state_ = State::kHeader;
  dst_ = nullptr;
  paused_ = false;
}

}  // namespace transport
}  // namespace starling
