// libFuzzer harness for the data-plane frame parser: DecodeFrameHeader() and
// FrameReceiver, the receiving half of a stream connection, which parses
// frame bodies and lands writes through an Inbox (regions registered,
// unregistered and retired; early writes; control and ERROR messages).
//
// Input: byte 0 chooses the form: bit 0 set, the rest is read as frames whose
// header checksums the harness fills in (frame_stream.h); clear, the rest is
// the byte stream as it is. Bits 1-3 choose how the stream is cut into
// reads. The harness checks what must always hold: the receiver never
// writes outside a registered region (ASan sees that), never reports a
// landed write that does not fit its region, and always ends cleanly.
#include <sys/uio.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/transport/frame.h"
#include "server/transport/frame_receiver.h"
#include "server/transport/inbox.h"
#include "tests/fuzz/frame_stream.h"

namespace starling {
namespace fuzz {
namespace {

using transport::FrameReceiver;
using transport::Inbox;

constexpr transport::RegionId kSmall = 1;  // 4 KiB
constexpr transport::RegionId kEmpty = 2;  // 0 bytes
constexpr size_t kSmallBytes = 4096;

// Serves the stream in reads of the chosen sizes.
class StreamSource : public transport::ByteSource {
 public:
  StreamSource(const std::vector<uint8_t>& stream, uint8_t pattern)
      : stream_(stream), pattern_(pattern) {}

  absl::StatusOr<size_t> ReadSome(const struct iovec* iov, int count) override {
    size_t budget = std::min(ReadSize(pattern_, reads_++), left());
    size_t got = 0;
    for (int i = 0; i < count && budget > 0; ++i) {
      const size_t n = std::min(budget, iov[i].iov_len);
      std::memcpy(iov[i].iov_base, stream_.data() + at_, n);
      at_ += n;
      got += n;
      budget -= n;
    }
    return got;
  }

  size_t left() const { return stream_.size() - at_; }

 private:
  const std::vector<uint8_t>& stream_;
  const uint8_t pattern_;
  size_t at_ = 0;
  size_t reads_ = 0;
};

void Check(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "frame_fuzzer: invariant broken: %s\n", what);
    std::abort();
  }
}

void FuzzFrames(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const uint8_t mode = data[0];
  // The header decoder on its own, at the start of the raw input.
  (void)transport::DecodeFrameHeader(absl::MakeConstSpan(data + 1, size - 1));

  const std::vector<uint8_t> stream =
      (mode & 1) ? BuildFrameStream(data + 1, size - 1)
                 : std::vector<uint8_t>(data + 1, data + size);

  std::vector<std::byte> small(kSmallBytes);
  Inbox::Options options;
  options.rank = 0;
  options.size = 2;
  options.max_early_bytes = 4096;
  options.name = [](int rank) {
    return absl::StrCat("rank ", rank, " (fuzz)");
  };
  Inbox inbox(options);
  (void)inbox.RegisterRegion(kSmall, absl::MakeSpan(small));
  (void)inbox.RegisterRegion(kEmpty, absl::Span<std::byte>());
  inbox.RetireRegions(100, 200);
  {
    FrameReceiver receiver(1, options.name, &inbox, /*max_control_bytes=*/4096);
    StreamSource source(stream, (mode >> 1) & 7);
    bool retired_all = false;
    for (int calls = 0; calls < 100000; ++calls) {
      FrameReceiver::Result result = receiver.Receive(&source);
      if (!result.error.ok()) break;
      if (result.paused) {
        // Waiting for room for an early write: retiring every unregistered
        // region lets it go on (and exercises that path) once.
        if (retired_all) break;
        retired_all = true;
        inbox.RetireRegions(3, UINT64_MAX);
        result = receiver.Resume();
        if (!result.error.ok() || result.paused) break;
        continue;
      }
      if (result.drained && source.left() == 0) break;
    }
    receiver.Abandon();
  }
  // Every landed write fits its region.
  for (transport::RegionId region : {kSmall, kEmpty}) {
    while (true) {
      absl::StatusOr<transport::WriteNotice> notice = inbox.WaitForWrite(
          transport::WriteMatch{region, 1, {}}, absl::InfinitePast());
      if (!notice.ok()) break;
      const uint64_t limit = region == kSmall ? kSmallBytes : 0;
      Check(notice->offset_bytes <= limit &&
                notice->length_bytes <= limit - notice->offset_bytes,
            "a landed write lies outside its region");
    }
  }
  Check(inbox.early_bytes() <= options.max_early_bytes,
        "early bytes above their bound");
  (void)inbox.DeregisterRegion(kSmall);
  (void)inbox.DeregisterRegion(kEmpty);
}

}  // namespace
}  // namespace fuzz
}  // namespace starling

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  starling::fuzz::FuzzFrames(data, size);
  return 0;
}
