#include "server/shard/shard_store.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/collective/shard_layout.h"

namespace starling {
namespace shard {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<std::unique_ptr<ShardStore>> MakeStore(size_t total, int ranks,
                                                      int rank) {
  ShardStoreOptions options;
  options.total_elements = total;
  options.ranks = ranks;
  options.rank = rank;
  return ShardStore::Create(options);
}

bool PageAligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % PageBuffer::PageBytes() == 0;
}

TEST(ShardStore, ShardIsTheLayoutBlockInsideTheFullBuffers) {
  // 10 elements over 4 ranks: 3 3 2 2.
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<ShardStore> store,
                         MakeStore(10, 4, rank));
    const collective::ShardLayout layout(10, 4);
    EXPECT_EQ(store->shard_begin(), layout.Begin(rank));
    EXPECT_EQ(store->shard_end(), layout.End(rank));
    EXPECT_EQ(store->parameters().size(), 10u);
    EXPECT_EQ(store->gradients().size(), 10u);
    EXPECT_EQ(store->shard_parameters().data(),
              store->parameters().data() + layout.Begin(rank));
    EXPECT_EQ(store->shard_parameters().size(), layout.Size(rank));
    EXPECT_EQ(store->shard_gradients().data(),
              store->gradients().data() + layout.Begin(rank));
    EXPECT_EQ(store->shard_gradients().size(), layout.Size(rank));
    EXPECT_EQ(store->ShardBytes(), layout.Size(rank) * 4);
    EXPECT_EQ(store->ParameterBytes(), 40u);
  }
}

TEST(ShardStore, BuffersArePageAlignedZeroedAndDistinct) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ShardStore> store,
                       MakeStore(100003, 3, 1));
  EXPECT_TRUE(PageAligned(store->parameters().data()));
  EXPECT_TRUE(PageAligned(store->gradients().data()));
  EXPECT_NE(store->parameters().data(), store->gradients().data());
  EXPECT_EQ(store->parameter_buffer().data(), store->parameters().data());
  EXPECT_EQ(store->parameter_buffer().mapped_bytes() % PageBuffer::PageBytes(),
            0u);
  EXPECT_GE(store->gradient_buffer().mapped_bytes(), 100003u * 4);
  for (float v : store->parameters()) ASSERT_EQ(v, 0.0f);
  for (float v : store->gradients()) ASSERT_EQ(v, 0.0f);
}

TEST(ShardStore, EmptyModelAndRanksWithoutElements) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ShardStore> empty, MakeStore(0, 2, 1));
  EXPECT_TRUE(empty->parameters().empty());
  EXPECT_TRUE(empty->shard_gradients().empty());
  EXPECT_EQ(empty->ShardBytes(), 0u);
  EXPECT_OK(empty->InitializeFromSeed(1, 1.0f));
  // 2 elements over 5 ranks: rank 4 owns nothing.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ShardStore> idle, MakeStore(2, 5, 4));
  EXPECT_EQ(idle->shard_elements(), 0u);
  EXPECT_EQ(idle->parameters().size(), 2u);
}

TEST(ShardStore, RejectsBadRanks) {
  EXPECT_THAT(MakeStore(10, 0, 0), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("over 0 ranks")));
  EXPECT_THAT(MakeStore(10, 4, 4), StatusIs(absl::StatusCode::kInvalidArgument,
                                            "rank 4 outside [0, 4)"));
  EXPECT_THAT(MakeStore(10, 4, -1),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(
      MakeStore(SIZE_MAX / 2, 1, 0),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overflows")));
}

TEST(ShardStore, SeededInitIsDeterministicBoundedAndSameOnEveryRank) {
  constexpr size_t kTotal = 1001;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ShardStore> a, MakeStore(kTotal, 1, 0));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ShardStore> b, MakeStore(kTotal, 7, 5));
  ASSERT_OK(a->InitializeFromSeed(42, 0.05f));
  ASSERT_OK(b->InitializeFromSeed(42, 0.05f));
  double sum = 0;
  for (size_t i = 0; i < kTotal; ++i) {
    ASSERT_EQ(a->parameters()[i], b->parameters()[i]) << i;
    ASSERT_LE(std::fabs(a->parameters()[i]), 0.05f);
    sum += a->parameters()[i];
  }
  // Roughly centred: the mean of 1001 uniforms on [-0.05, 0.05] has standard
  // deviation 0.05 / sqrt(3 * 1001) ~ 0.0009.
  EXPECT_LT(std::fabs(sum / kTotal), 0.005);
  // Not constant, and a different seed gives different values.
  EXPECT_NE(a->parameters()[0], a->parameters()[1]);
  ASSERT_OK(b->InitializeFromSeed(43, 0.05f));
  EXPECT_NE(a->parameters()[0], b->parameters()[0]);

  EXPECT_THAT(a->InitializeFromSeed(1, -1.0f),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(a->InitializeFromSeed(1, NAN),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ShardStore, InitializesFromValuesAndLoadsItsShard) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ShardStore> store, MakeStore(5, 2, 1));
  ASSERT_OK(store->InitializeFromValues({1, 2, 3, 4, 5}));
  EXPECT_THAT(std::vector<float>(store->parameters().begin(),
                                 store->parameters().end()),
              ::testing::ElementsAre(1, 2, 3, 4, 5));
  // Rank 1 of 2 owns [3, 5).
  ASSERT_OK(store->LoadShard({40, 50}));
  EXPECT_THAT(std::vector<float>(store->parameters().begin(),
                                 store->parameters().end()),
              ::testing::ElementsAre(1, 2, 3, 40, 50));
  EXPECT_THAT(store->InitializeFromValues({1, 2}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "initial parameters hold 2 elements; the model has 5"));
  EXPECT_THAT(store->LoadShard({1, 2, 3}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "shard of rank 1 holds 2 elements, got 3"));
  EXPECT_THAT(store->InitializeFromValues({1, 2, NAN, 4, 5}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("element 2 of 5 is nan")));
}

TEST(ShardStore, ZeroGradientsClearsTheWholeBuffer) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ShardStore> store, MakeStore(9, 3, 0));
  for (float& g : store->gradients()) g = 3.0f;
  store->ZeroGradients();
  for (float g : store->gradients()) EXPECT_EQ(g, 0.0f);
}

}  // namespace
}  // namespace shard
}  // namespace starling
