#include "server/shard/page_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "gtest/gtest.h"
#include "server/base/shared_parameters.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace shard {
namespace {

TEST(PageBuffer, IsPageAlignedZeroFilledAndRoundedToPages) {
  const size_t page = PageBuffer::PageBytes();
  ASSERT_OK_AND_ASSIGN(PageBuffer buffer, PageBuffer::Allocate(page + 1));
  ASSERT_NE(buffer.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % page, 0u);
  EXPECT_EQ(buffer.size_bytes(), page + 1);
  EXPECT_EQ(buffer.mapped_bytes(), 2 * page);
  const unsigned char* bytes = static_cast<unsigned char*>(buffer.data());
  for (size_t i = 0; i < buffer.mapped_bytes(); ++i) ASSERT_EQ(bytes[i], 0);
}

TEST(PageBuffer, ZeroBytesMapsNothing) {
  ASSERT_OK_AND_ASSIGN(PageBuffer buffer, PageBuffer::Allocate(0));
  EXPECT_EQ(buffer.data(), nullptr);
  EXPECT_EQ(buffer.mapped_bytes(), 0u);
}

TEST(PageBuffer, MovesOwnership) {
  ASSERT_OK_AND_ASSIGN(PageBuffer a, PageBuffer::Allocate(100));
  void* data = a.data();
  std::memset(data, 7, 100);
  PageBuffer b = std::move(a);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.data(), data);
  ASSERT_OK_AND_ASSIGN(PageBuffer c, PageBuffer::Allocate(10));
  c = std::move(b);
  EXPECT_EQ(c.data(), data);
  EXPECT_EQ(static_cast<unsigned char*>(c.data())[99], 7);
}

TEST(PageBuffer, RejectsSizesThatOverflowWhenRounded) {
  EXPECT_THAT(PageBuffer::Allocate(SIZE_MAX),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(PageBuffer, ReportsAMappingTheKernelRefuses) {
  // Larger than any user address space.
  EXPECT_THAT(PageBuffer::Allocate(size_t{1} << 62),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

TEST(PageBuffer, SharedBufferIsASealedMemfdOthersCanMapReadOnlyOnly) {
  ASSERT_OK_AND_ASSIGN(PageBuffer buffer,
                       PageBuffer::AllocateShared(10000, "test"));
  const size_t page = PageBuffer::PageBytes();
  ASSERT_NE(buffer.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % page, 0u);
  EXPECT_EQ(buffer.mapped_bytes() % page, 0u);
  std::memset(buffer.data(), 3, 10000);  // our own mapping is writable
  const auto* header =
      static_cast<const SharedParametersHeader*>(buffer.header());
  EXPECT_EQ(header->version.load(), 0);
  EXPECT_EQ(header->writing.load(), -1);

  const int fd = buffer.fd();
  struct stat st = {};
  ASSERT_EQ(fstat(fd, &st), 0);
  EXPECT_EQ(static_cast<size_t>(st.st_size), SharedParametersFileBytes(10000));
  const int seals = fcntl(fd, F_GET_SEALS);
  EXPECT_NE(seals & F_SEAL_SHRINK, 0);
  EXPECT_NE(seals & F_SEAL_GROW, 0);
  EXPECT_NE(ftruncate(fd, 0), 0);
#ifdef F_SEAL_FUTURE_WRITE
  EXPECT_NE(seals & F_SEAL_FUTURE_WRITE, 0);
  EXPECT_EQ(mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, page),
            MAP_FAILED);
#endif
  void* view = mmap(nullptr, page, PROT_READ, MAP_SHARED, fd, page);
  ASSERT_NE(view, MAP_FAILED);
  EXPECT_EQ(static_cast<const unsigned char*>(view)[9999 % page], 3);
#ifdef F_SEAL_FUTURE_WRITE
  EXPECT_NE(mprotect(view, page, PROT_READ | PROT_WRITE), 0);
#endif
  munmap(view, page);
}

}  // namespace
}  // namespace shard
}  // namespace starling
