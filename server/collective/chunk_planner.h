// ChunkPlanner: cuts a byte range into element-aligned chunks so that a
// collective can reduce chunk k while chunk k+1 is still arriving.
//
// A range of B bytes (E elements) is cut into C = ceil(B / chunk_bytes)
// chunks (at most kMaxChunks), and the elements are split over them as
// ShardLayout(E, C) does, so chunks differ by at most one element. Sender and
// receiver plan the same range identically without talking. Plans are pure
// arithmetic (no allocation). Immutable; thread-safe.
#ifndef STARLING_SERVER_COLLECTIVE_CHUNK_PLANNER_H_
#define STARLING_SERVER_COLLECTIVE_CHUNK_PLANNER_H_

#include <cstddef>

namespace starling {
namespace collective {

// A chunk of a range: [offset_bytes, offset_bytes + length_bytes), relative
// to the range's start.
struct Chunk {
  size_t offset_bytes = 0;
  size_t length_bytes = 0;
};

class ChunkPlanner {
 public:
  // Default target chunk size: large enough to amortise a write's fixed cost,
  // small enough that reducing overlaps the next chunk's transfer.
  static constexpr size_t kDefaultChunkBytes = 512 * 1024;
  // Chunk indices travel in 16 bits of a write's immediate value.
  static constexpr size_t kMaxChunks = 1 << 16;

  // REQUIRES: element_bytes >= 1. A chunk_bytes below one element means one
  // element.
  ChunkPlanner(size_t element_bytes, size_t chunk_bytes);

  size_t element_bytes() const { return element_bytes_; }
  size_t chunk_bytes() const { return chunk_bytes_; }

  // Number of chunks of a range of `range_bytes` (0 for an empty range).
  // REQUIRES: range_bytes is a multiple of element_bytes().
  size_t NumChunks(size_t range_bytes) const;

  // Chunk `k` of a range of `range_bytes`. REQUIRES: k < NumChunks(range).
  Chunk Get(size_t range_bytes, size_t k) const;

 private:
  size_t element_bytes_;
  size_t chunk_bytes_;  // a multiple of element_bytes_, at least one element
};

}  // namespace collective
}  // namespace starling

#endif  // STARLING_SERVER_COLLECTIVE_CHUNK_PLANNER_H_
