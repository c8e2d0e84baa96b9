#include "server/base/job_config_checks.h"

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

constexpr const char* kElasticModes[] = {"sync_easgd", "async_easgd",
                                         "async_measgd", "hogwild_easgd",
                                         "round_robin_easgd"};

JobConfig GoodElastic(const char* mode) {
  JobConfig config = Good();
  config.set_mode(FindMode(mode)->mode);
  config.set_optimizer("easgd");
  config.set_elastic_tau(4);
  config.set_elastic_beta(0.9);
  config.set_elastic_momentum(0.99);
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
    EXPECT_FALSE(IsElasticMode(FindMode(mode)->mode));
    EXPECT_STREQ(DefaultOptimizer(FindMode(mode)->mode), "sgd");
  }
  for (const char* mode : kElasticModes) {
    EXPECT_OK(CheckJobConfig(GoodElastic(mode))) << mode;
    EXPECT_TRUE(IsElasticMode(FindMode(mode)->mode));
    EXPECT_STREQ(DefaultOptimizer(FindMode(mode)->mode), "easgd");
  }
  EXPECT_THAT(ImplementedModeNames(),
              ElementsAre("sync_sgd", "async_sgd", "parameter_server",
                          "sync_easgd", "async_easgd", "async_measgd",
                          "hogwild_easgd", "round_robin_easgd"));
  JobConfig config = Good();
  config.set_mode(JobConfig::MODE_UNSPECIFIED);
  EXPECT_THAT(CheckJobConfig(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("is not one of sync_sgd")));
}

TEST(JobConfigChecks, OnlyTheSynchronousModesRunTheSynchronousStep) {
  for (const char* mode : {"sync_sgd", "async_sgd", "sync_easgd"}) {
    EXPECT_FALSE(UsesShardOwners(FindMode(mode)->mode)) << mode;
  }
  for (const char* mode : {"parameter_server", "async_easgd", "async_measgd",
                           "hogwild_easgd", "round_robin_easgd"}) {
    EXPECT_TRUE(UsesShardOwners(FindMode(mode)->mode)) << mode;
  }
}

TEST(JobConfigChecks, EasgdIsTheCentreUpdateOfTheElasticModesOnly) {
  JobConfig config = Good();
  config.set_optimizer("easgd");
  EXPECT_THAT(CheckJobConfig(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--optimizer=easgd is the centre update of the EASGD "
                       "modes (sync_easgd, async_easgd, async_measgd, "
                       "hogwild_easgd, round_robin_easgd); --mode=sync_sgd "
                       "takes one of none, sgd, momentum, adam"));
  config = GoodElastic("hogwild_easgd");
  config.set_optimizer("momentum");
  EXPECT_THAT(CheckJobConfig(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--optimizer=momentum: --mode=hogwild_easgd "
                                 "keeps the centre variable on the daemons, "
                                 "updated by --optimizer=easgd")));
  config.set_optimizer("lbfgs");
  EXPECT_THAT(CheckJobConfig(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--optimizer=lbfgs: unknown optimizer")));
}

TEST(JobConfigChecks, ElasticSettingsInRange) {
  JobConfig config = GoodElastic("sync_easgd");
  config.set_elastic_tau(0);
  EXPECT_THAT(CheckJobConfig(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--elastic_tau=0: the steps between elastic exchanges "
                       "must be >= 1"));
  for (double beta : {0.0, 1.5, static_cast<double>(NAN)}) {
    config = GoodElastic("async_easgd");
    config.set_elastic_beta(beta);
    EXPECT_THAT(CheckJobConfig(config),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("beta (alpha times the number of workers) "
                                   "must be in (0, 1]")))
        << beta;
  }
  config = GoodElastic("async_measgd");
  config.set_elastic_momentum(1.0);
  EXPECT_THAT(CheckJobConfig(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--elastic_momentum=1: the momentum must be in [0, 1)"));
  // Not looked at outside the EASGD modes (sent as 0 there).
  config = Good();
  config.set_elastic_tau(0);
  EXPECT_OK(CheckJobConfig(config));
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
  EXPECT_EQ(KnownModes().size(), 8u);
  EXPECT_EQ(FindMode("sync"), nullptr);
}

}  // namespace
}  // namespace proto
}  // namespace starling
