#include "server/shard/optimizer/optimizer_factory.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/optimizer_names.h"
#include "server/base/status_matchers.h"
#include "server/collective/shard_layout.h"
#include "server/shard/optimizer/optimizer.h"

namespace starling {
namespace shard {
namespace {

using ::testing::HasSubstr;

OptimizerOptions Named(std::string name) {
  OptimizerOptions options;
  options.name = std::move(name);
  return options;
}

// Floats of state per element: SGD 0, momentum 1, Adam 2.
struct Kind {
  const char* name;
  uint64_t floats_per_element;
};
constexpr Kind kKinds[] = {{"sgd", 0}, {"momentum", 1}, {"adam", 2}};

TEST(CreateOptimizer, BuildsEachNamedOptimizerWithStateForItsShard) {
  for (const Kind& kind : kKinds) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Optimizer> opt,
                         CreateOptimizer(Named(kind.name), 12345));
    EXPECT_EQ(opt->name(), kind.name);
    EXPECT_EQ(opt->shard_elements(), 12345u);
    EXPECT_EQ(opt->StateBytes(), 12345u * kind.floats_per_element * 4u)
        << kind.name;
  }
}

// The shared list (server/base/optimizer_names.h) that the coordinator
// validates --optimizer against: every updating optimizer in it is built,
// with the state slots the list gives.
TEST(CreateOptimizer, BuildsEveryUpdatingOptimizerOfTheSharedList) {
  for (const std::string& name : OptimizerNames(OptimizerFilter::kUpdating)) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Optimizer> opt,
                         CreateOptimizer(Named(name), 100));
    EXPECT_EQ(opt->StateBytes(), 100u * 4u * FindOptimizer(name)->state_slots)
        << name;
  }
}

TEST(CreateOptimizer, UnknownNameListsTheValidOnes) {
  EXPECT_THAT(CreateOptimizer(Named("adagrad"), 10),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "unknown optimizer 'adagrad'; valid optimizers: sgd, "
                       "momentum, adam, easgd"));
  EXPECT_THAT(CreateOptimizer(Named("SGD"), 10),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown optimizer 'SGD'")));
}

TEST(CreateOptimizer, RejectsOptionsOutOfRange) {
  struct Case {
    void (*set)(OptimizerOptions&);
    const char* message;
  };
  const Case cases[] = {
      {[](OptimizerOptions& o) { o.learning_rate = -0.1f; },
       "optimizer option learning_rate = -0.1 must be finite and >= 0"},
      {[](OptimizerOptions& o) { o.learning_rate = INFINITY; },
       "learning_rate = inf"},
      {[](OptimizerOptions& o) { o.momentum = 1.0f; },
       "momentum = 1 must be in [0, 1)"},
      {[](OptimizerOptions& o) { o.beta1 = -0.5f; }, "beta1 = -0.5"},
      {[](OptimizerOptions& o) { o.beta2 = 1.0f; }, "beta2 = 1"},
      {[](OptimizerOptions& o) { o.epsilon = 0.0f; },
       "epsilon = 0 must be finite and > 0"},
      {[](OptimizerOptions& o) { o.weight_decay = NAN; }, "weight_decay = nan"},
      {[](OptimizerOptions& o) { o.gradient_scale = 0.0f; },
       "gradient_scale = 0"},
  };
  for (const Kind& kind : kKinds) {
    for (const Case& c : cases) {
      OptimizerOptions options = Named(kind.name);
      c.set(options);
      EXPECT_THAT(
          CreateOptimizer(options, 4),
          StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)))
          << kind.name;
    }
  }
}

// DESIGN.md: optimizer state exists once per cluster, split N ways. Each
// rank's optimizer covers its ShardLayout block, so the ranks' state adds up
// to one replicated optimizer's, and no rank holds more than
// ceil(total / N) elements' worth.
TEST(CreateOptimizer, EachRankHoldsOneNthOfTheReplicatedState) {
  for (const Kind& kind : kKinds) {
    const uint64_t per_element = kind.floats_per_element * sizeof(float);
    for (size_t total : {size_t{0}, size_t{1}, size_t{7}, size_t{1000},
                         size_t{1001}, size_t{65537}}) {
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<Optimizer> replicated,
                           CreateOptimizer(Named(kind.name), total));
      for (int ranks : {1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 24, 32}) {
        const collective::ShardLayout layout(total, ranks);
        uint64_t sum = 0;
        uint64_t max = 0;
        for (int rank = 0; rank < ranks; ++rank) {
          ASSERT_OK_AND_ASSIGN(
              std::unique_ptr<Optimizer> opt,
              CreateOptimizer(Named(kind.name), layout.Size(rank)));
          sum += opt->StateBytes();
          max = std::max(max, opt->StateBytes());
        }
        const uint64_t ceil_share = (total + ranks - 1) / ranks;
        EXPECT_EQ(sum, replicated->StateBytes())
            << kind.name << " total " << total << " ranks " << ranks;
        EXPECT_LE(max, ceil_share * per_element)
            << kind.name << " total " << total << " ranks " << ranks;
      }
    }
  }
}

}  // namespace
}  // namespace shard
}  // namespace starling
