#include "proto/job_config_checks.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace proto {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

JobConfig Good() {
  JobConfig config;
  config.set_mode(JobConfig::MODE_SYNC_SGD);
  config.set_optimizer("adam");
  config.set_learning_rate(0.01);
  return config;
}

TEST(JobConfigChecks, AcceptsWhatTheDaemonsRun) {
  for (const char* mode : {"sync_sgd", "async_sgd", "parameter_server"}) {
    for (const char* optimizer : {"none", "sgd", "momentum", "adam"}) {
      JobConfig config = Good();
      config.set_mode(FindMode(mode)->mode);
      config.set_optimizer(optimizer);
      EXPECT_OK(CheckJobConfig(config)) << mode << " " << optimizer;
    }
  }
  EXPECT_THAT(ImplementedModeNames(),
              ElementsAre("sync_sgd", "async_sgd", "parameter_server"));
}

TEST(JobConfigChecks, RefusesUnimplementedModesByName) {
  for (const char* mode :
       {"sync_easgd", "async_easgd", "async_measgd", "hogwild_easgd"}) {
    JobConfig config = Good();
    config.set_mode(FindMode(mode)->mode);
    EXPECT_THAT(
        CheckJobConfig(config),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 absl::StrCat("--mode=", mode,
                              " is not implemented yet; implemented modes: "
                              "sync_sgd, async_sgd, parameter_server")));
  }
  JobConfig config = Good();
  config.set_mode(JobConfig::MODE_UNSPECIFIED);
  EXPECT_THAT(CheckJobConfig(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("is not one of sync_sgd")));
}

TEST(JobConfigChecks, RefusesUnknownAndUnimplementedOptimizers) {
  JobConfig config = Good();
  config.set_optimizer("easgd");
  EXPECT_THAT(CheckJobConfig(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--optimizer=easgd is not implemented yet; implemented "
                       "optimizers: none, sgd, momentum, adam"));
  config.set_optimizer("lbfgs");
  EXPECT_THAT(CheckJobConfig(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--optimizer=lbfgs: unknown optimizer")));
}

TEST(JobConfigChecks, LearningRateMustBeFiniteAndPositive) {
  const struct {
    double value;
    const char* shown;
  } bad[] = {{INFINITY, "inf"}, {NAN, "nan"}, {0, "0"}, {-0.5, "-0.5"}};
  for (const auto& b : bad) {
    JobConfig config = Good();
    config.set_learning_rate(b.value);
    EXPECT_THAT(CheckJobConfig(config),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         absl::StrCat("--learning_rate=", b.shown,
                                      ": the learning rate must be finite "
                                      "and > 0")));
  }
}

TEST(JobConfigChecks, ModeNamesRoundTrip) {
  for (const ModeInfo& info : KnownModes()) {
    EXPECT_EQ(FindMode(info.name), &info);
    EXPECT_EQ(FindMode(info.mode), &info);
  }
  EXPECT_EQ(KnownModes().size(), 7u);
  EXPECT_EQ(FindMode("sync"), nullptr);
}

}  // namespace
}  // namespace proto
}  // namespace starling
