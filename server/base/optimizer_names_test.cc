#include "server/base/optimizer_names.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace starling {
namespace {

using ::testing::ElementsAre;

TEST(OptimizerNames, ListsEachKindOnce) {
  EXPECT_THAT(OptimizerNames(OptimizerFilter::kAll),
              ElementsAre("none", "sgd", "momentum", "adam", "easgd"));
  EXPECT_THAT(OptimizerNames(OptimizerFilter::kImplemented),
              ElementsAre("none", "sgd", "momentum", "adam", "easgd"));
  EXPECT_THAT(OptimizerNames(OptimizerFilter::kUpdating),
              ElementsAre("sgd", "momentum", "adam", "easgd"));
}

TEST(OptimizerNames, StateSlotsPerOptimizer) {
  EXPECT_EQ(FindOptimizer("sgd")->state_slots, 0);
  EXPECT_EQ(FindOptimizer("momentum")->state_slots, 1);
  EXPECT_EQ(FindOptimizer("adam")->state_slots, 2);
  EXPECT_FALSE(FindOptimizer("none")->updates);
  EXPECT_EQ(FindOptimizer("easgd")->state_slots, 0);
  EXPECT_EQ(FindOptimizer("SGD"), nullptr);
  EXPECT_EQ(FindOptimizer("lbfgs"), nullptr);
}

}  // namespace
}  // namespace starling
