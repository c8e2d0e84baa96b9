// Turns fuzzer input into a stream of data-plane frames whose header
// checksums hold, so that a harness gets past DecodeFrameHeader()'s CRC
// check (which random bytes almost never pass) to the code behind it.
#ifndef STARLING_TESTS_FUZZ_FRAME_STREAM_H_
#define STARLING_TESTS_FUZZ_FRAME_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace starling {
namespace fuzz {

// Reads `data` as a sequence of [44 header bytes][payload]: each header gets
// its CRC-32C appended (making 48 bytes, frame_format.md), and its payload is
// the next min(length field, bytes left) input bytes. A short final header
// is copied as it is.
std::vector<uint8_t> BuildFrameStream(const uint8_t* data, size_t size);

// Splits a stream into reads: the size of read i cycles through a pattern
// chosen by `pattern` (byte-at-a-time, odd sizes, whole frames, all at once).
size_t ReadSize(uint8_t pattern, size_t read_index);

}  // namespace fuzz
}  // namespace starling

#endif  // STARLING_TESTS_FUZZ_FRAME_STREAM_H_
