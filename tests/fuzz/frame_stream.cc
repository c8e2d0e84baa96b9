#include "tests/fuzz/frame_stream.h"

#include <algorithm>

#include "server/transport/crc32c.h"
#include "server/transport/frame.h"

namespace starling {
namespace fuzz {

std::vector<uint8_t> BuildFrameStream(const uint8_t* data, size_t size) {
  constexpr size_t kCrcAt = transport::kFrameHeaderBytes - 4;
  std::vector<uint8_t> stream;
  size_t at = 0;
  while (at < size) {
    const size_t left = size - at;
    if (left < kCrcAt) {
      stream.insert(stream.end(), data + at, data + size);
      break;
    }
    const size_t begin = stream.size();
    stream.insert(stream.end(), data + at, data + at + kCrcAt);
    stream.resize(begin + transport::kFrameHeaderBytes);
    transport::PutLittleEndian32(
        transport::Crc32c(stream.data() + begin, kCrcAt),
        stream.data() + begin + kCrcAt);
    at += kCrcAt;
    const uint64_t length =
        transport::GetLittleEndian64(stream.data() + begin + 24);
    const size_t payload =
        static_cast<size_t>(std::min<uint64_t>(length, size - at));
    stream.insert(stream.end(), data + at, data + at + payload);
    at += payload;
  }
  return stream;
}

size_t ReadSize(uint8_t pattern, size_t read_index) {
  static constexpr size_t kPatterns[8][4] = {
      {1, 1, 1, 1},
      {7, 13, 1, 100},
      {48, 48, 24, 40},
      {4096, 4096, 4096, 4096},
      {48, 1, 47, 1024},
      {3, 64, 5, 9000},
      {1 << 20, 1 << 20, 1 << 20, 1 << 20},
      {100, 1, 2, 3}};
  return kPatterns[pattern % 8][read_index % 4];
}

}  // namespace fuzz
}  // namespace starling
