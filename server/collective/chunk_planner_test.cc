#include "server/collective/chunk_planner.h"

#include "gtest/gtest.h"

namespace starling {
namespace collective {
namespace {

TEST(ChunkPlanner, EmptyRangeHasNoChunks) {
  const ChunkPlanner planner(4, 1024);
  EXPECT_EQ(planner.NumChunks(0), 0u);
}

TEST(ChunkPlanner, ChunksAreElementAlignedAndTileTheRange) {
  for (size_t element : {2u, 4u, 8u}) {
    for (size_t chunk_bytes : {1u, 7u, 24u, 1000u}) {
      const ChunkPlanner planner(element, chunk_bytes);
      ASSERT_EQ(planner.chunk_bytes() % element, 0u);
      for (size_t elements : {1u, 5u, 97u, 4096u}) {
        const size_t range = elements * element;
        size_t next = 0;
        for (size_t k = 0; k < planner.NumChunks(range); ++k) {
          const Chunk c = planner.Get(range, k);
          ASSERT_EQ(c.offset_bytes, next);
          ASSERT_EQ(c.offset_bytes % element, 0u);
          ASSERT_EQ(c.length_bytes % element, 0u);
          ASSERT_GT(c.length_bytes, 0u);
          ASSERT_LE(c.length_bytes, planner.chunk_bytes());
          next += c.length_bytes;
        }
        ASSERT_EQ(next, range);
      }
    }
  }
}

TEST(ChunkPlanner, SplitsEvenlyInsteadOfLeavingASliver) {
  const ChunkPlanner planner(4, 400);  // 100 elements per chunk at most
  EXPECT_EQ(planner.NumChunks(4 * 201), 3u);
  EXPECT_EQ(planner.Get(4 * 201, 0).length_bytes, 4u * 67);
  EXPECT_EQ(planner.Get(4 * 201, 2).length_bytes, 4u * 67);
}

TEST(ChunkPlanner, CapsTheChunkCountForTheImmediateField) {
  const ChunkPlanner planner(4, 4);
  const size_t range = 4 * (ChunkPlanner::kMaxChunks * 3 + 1);
  EXPECT_EQ(planner.NumChunks(range), ChunkPlanner::kMaxChunks);
  const Chunk last = planner.Get(range, ChunkPlanner::kMaxChunks - 1);
  EXPECT_EQ(last.offset_bytes + last.length_bytes, range);
}

}  // namespace
}  // namespace collective
}  // namespace starling
