#include "server/shard/finite_check.h"

#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace shard {
namespace {

TEST(CheckFinite, AcceptsFiniteValuesIncludingExtremes) {
  std::vector<float> values(10000, 1.5f);
  values[7] = std::numeric_limits<float>::max();
  values[8] = -std::numeric_limits<float>::max();
  values[9] = std::numeric_limits<float>::denorm_min();
  values[10] = -0.0f;
  EXPECT_OK(CheckFinite(values, "gradient"));
  EXPECT_OK(CheckFinite({}, "gradient"));
}

TEST(CheckFinite, NamesTheFirstBadElement) {
  // Sizes around the internal block length, bad element in various blocks.
  for (size_t size : {1u, 4095u, 4096u, 4097u, 10000u}) {
    for (size_t bad : {size_t{0}, size / 2, size - 1}) {
      std::vector<float> values(size, 0.25f);
      values[bad] = std::nanf("");
      if (bad + 1 < size) values[size - 1] = INFINITY;  // a later one
      EXPECT_THAT(CheckFinite(values, "gradient"),
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           absl::StrCat("gradient element ", bad, " of ", size,
                                        " is nan")))
          << "size " << size << " bad " << bad;
    }
  }
}

TEST(CheckFinite, DistinguishesInfinities) {
  std::vector<float> values = {1.0f, INFINITY, 2.0f};
  EXPECT_THAT(
      CheckFinite(values, "x"),
      StatusIs(absl::StatusCode::kInvalidArgument, "x element 1 of 3 is inf"));
  values[1] = -INFINITY;
  EXPECT_THAT(
      CheckFinite(values, "x"),
      StatusIs(absl::StatusCode::kInvalidArgument, "x element 1 of 3 is -inf"));
}

}  // namespace
}  // namespace shard
}  // namespace starling
