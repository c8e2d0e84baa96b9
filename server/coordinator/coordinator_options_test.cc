#include "server/coordinator/coordinator_options.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/job_config_checks.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace coordinator {
namespace {

using ::testing::HasSubstr;

CoordinatorOptions Valid() {
  CoordinatorOptions options;
  options.job_id = "job";
  options.expected_nodes = 2;
  return options;
}

TEST(CoordinatorOptions, ParameterCountIsOptional) {
  CoordinatorOptions options = Valid();
  ASSERT_OK(ValidateAndComplete(&options));
  EXPECT_EQ(options.parameter_count, 0u);
  EXPECT_EQ(JobConfigFor(options).parameter_count(), 0u);
}

TEST(CoordinatorOptions, TensorsFixTheParameterCount) {
  CoordinatorOptions options = Valid();
  proto::TensorSpec w;
  w.set_name("w");
  w.add_shape(10);
  w.add_shape(3);
  w.set_dtype(proto::DATA_TYPE_FLOAT32);
  options.tensors = {w};
  ASSERT_OK(ValidateAndComplete(&options));
  EXPECT_EQ(options.parameter_count, 30u);
  options.parameter_count = 31;
  EXPECT_THAT(ValidateAndComplete(&options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "coordinator option parameter_count: 31 elements, but "
                       "the tensors hold 30"));
  options.tensors[0].set_shape(0, -1);
  EXPECT_THAT(ValidateAndComplete(&options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("negative dimension")));
}

TEST(CoordinatorOptions, RefusesWhatTheDaemonsWouldRefuseNamingTheFlag) {
  const struct {
    void (*set)(CoordinatorOptions&);
    const char* message;
  } cases[] = {
      {[](CoordinatorOptions& o) { o.learning_rate = INFINITY; },
       "--learning_rate=inf: the learning rate must be finite and > 0"},
      {[](CoordinatorOptions& o) { o.learning_rate = std::nan(""); },
       "--learning_rate=nan"},
      {[](CoordinatorOptions& o) { o.learning_rate = 0; },
       "--learning_rate=0:"},
      {[](CoordinatorOptions& o) { o.learning_rate = -1; },
       "--learning_rate=-1:"},
      {[](CoordinatorOptions& o) { o.optimizer = "easgd"; },
       "--optimizer=easgd is the centre update of the EASGD modes"},
      {[](CoordinatorOptions& o) { o.optimizer = "lbfgs"; },
       "--optimizer=lbfgs: unknown optimizer 'lbfgs': expected one of none, "
       "sgd, momentum, adam, easgd"},
      {[](CoordinatorOptions& o) {
         o.mode = proto::JobConfig::MODE_SYNC_EASGD;
       },
       "--optimizer=sgd: --mode=sync_easgd keeps the centre variable on the "
       "daemons"},
      {[](CoordinatorOptions& o) {
         o.mode = proto::JobConfig::MODE_HOGWILD_EASGD;
         o.optimizer = "";
         o.elastic_tau = 0;
       },
       "--elastic_tau=0: the steps between elastic exchanges must be >= 1"},
      {[](CoordinatorOptions& o) { o.checkpoint_interval = absl::Minutes(10); },
       "--checkpoint_interval=10m needs --checkpoint_dir"},
      {[](CoordinatorOptions& o) {
         o.checkpoint_dir = "/shared/ckpt";
         o.checkpoint_interval = absl::Seconds(-1);
       },
       "--checkpoint_interval=-1s: must be 0 (none) or at least 1ms"},
      {[](CoordinatorOptions& o) {
         o.state_file = "/var/lib/starling/coordinator.state";
         o.state_etcd = "http://10.0.0.5:2379";
       },
       "--state_file=/var/lib/starling/coordinator.state and "
       "--state_etcd=http://10.0.0.5:2379: the coordinator records its job in "
       "one place"},
      {[](CoordinatorOptions& o) {
         o.state_etcd = "http://10.0.0.5:2379";
         o.state_etcd_prefix = "starling";
       },
       "--state_etcd_prefix='starling': must begin with '/'"},
  };
  for (const auto& c : cases) {
    CoordinatorOptions options = Valid();
    c.set(options);
    EXPECT_THAT(
        ValidateAndComplete(&options),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)))
        << c.message;
  }
  for (auto mode :
       {proto::JobConfig::MODE_SYNC_SGD, proto::JobConfig::MODE_ASYNC_SGD,
        proto::JobConfig::MODE_PARAMETER_SERVER}) {
    CoordinatorOptions options = Valid();
    options.mode = mode;
    EXPECT_OK(ValidateAndComplete(&options)) << mode;
  }
}

TEST(CoordinatorOptions, ElasticModesDefaultToTheCentreUpdate) {
  CoordinatorOptions options = Valid();
  options.mode = proto::JobConfig::MODE_ASYNC_MEASGD;
  options.optimizer = "";
  options.elastic_tau = 16;
  ASSERT_OK(ValidateAndComplete(&options));
  EXPECT_EQ(options.optimizer, "easgd");
  proto::JobConfig config = JobConfigFor(options);
  EXPECT_EQ(config.optimizer(), "easgd");
  EXPECT_EQ(config.elastic_tau(), 16);
  EXPECT_EQ(config.elastic_beta(), 0.9);
  EXPECT_EQ(config.elastic_momentum(), 0.99);
  // Sent as 0 outside the EASGD modes.
  options = Valid();
  options.optimizer = "";
  ASSERT_OK(ValidateAndComplete(&options));
  EXPECT_EQ(options.optimizer, "sgd");
  config = JobConfigFor(options);
  EXPECT_EQ(config.elastic_tau(), 0);
  EXPECT_EQ(config.elastic_beta(), 0);
}

TEST(CoordinatorOptions, JobConfigCarriesTheOptionsAndHeartbeatPeriod) {
  CoordinatorOptions options = Valid();
  options.optimizer = "momentum";
  options.learning_rate = 0.5;
  options.heartbeat_timeout = absl::Seconds(2);
  ASSERT_OK(ValidateAndComplete(&options));
  const proto::JobConfig config = JobConfigFor(options);
  EXPECT_EQ(config.optimizer(), "momentum");
  EXPECT_EQ(config.learning_rate(), 0.5);
  EXPECT_EQ(config.heartbeat_timeout_ms(), 2000);
  EXPECT_EQ(config.heartbeat_interval_ms(), 250);
  EXPECT_EQ(config.mode(), proto::JobConfig::MODE_SYNC_SGD);
}

TEST(CoordinatorOptions, TheHeartbeatIntervalIsAtMost250msUnlessGiven) {
  CoordinatorOptions options = Valid();
  options.heartbeat_timeout = absl::Seconds(1);
  ASSERT_OK(ValidateAndComplete(&options));
  EXPECT_EQ(JobConfigFor(options).heartbeat_interval_ms(), 200);  // a fifth
  options.heartbeat_interval = absl::Milliseconds(100);
  ASSERT_OK(ValidateAndComplete(&options));
  EXPECT_EQ(JobConfigFor(options).heartbeat_interval_ms(), 100);
  options.heartbeat_interval = absl::Milliseconds(600);  // over half
  EXPECT_THAT(ValidateAndComplete(&options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("heartbeat_interval: 600ms is not in 0 "
                                 "(automatic) .. half the heartbeat timeout "
                                 "1s")));
}

TEST(CoordinatorOptions, StalenessIsSentInAsyncSgdOnly) {
  CoordinatorOptions options = Valid();
  EXPECT_EQ(options.staleness, 1);
  options.staleness = 3;
  ASSERT_OK(ValidateAndComplete(&options));
  EXPECT_EQ(JobConfigFor(options).staleness(), 0);
  for (auto mode : {proto::JobConfig::MODE_SYNC_SGD,
                    proto::JobConfig::MODE_PARAMETER_SERVER}) {
    options.mode = mode;
    ASSERT_OK(ValidateAndComplete(&options));
    EXPECT_EQ(JobConfigFor(options).staleness(), 0) << mode;
  }
  options.mode = proto::JobConfig::MODE_ASYNC_SGD;
  ASSERT_OK(ValidateAndComplete(&options));
  EXPECT_EQ(JobConfigFor(options).staleness(), 3);
  options.staleness = 0;
  ASSERT_OK(ValidateAndComplete(&options));
  EXPECT_EQ(JobConfigFor(options).staleness(), 0);
  options.staleness = -1;
  EXPECT_THAT(ValidateAndComplete(&options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--staleness=-1: the staleness bound must be >= 0"));
}

TEST(CoordinatorOptions, CheckpointsByStepsOrTimeReachTheDaemons) {
  CoordinatorOptions options = Valid();
  options.checkpoint_dir = "/shared/ckpt";
  options.checkpoint_interval = absl::Minutes(10);
  ASSERT_OK(ValidateAndComplete(&options));
  const proto::JobConfig config = JobConfigFor(options);
  EXPECT_EQ(config.checkpoint_interval_ms(), 600000);
  EXPECT_EQ(config.checkpoint_every_steps(), 0);
  EXPECT_EQ(config.checkpoint_dir(), "/shared/ckpt/" + options.job_id);
  EXPECT_TRUE(proto::WritesCheckpoints(config));
  options.checkpoint_interval = absl::ZeroDuration();
  EXPECT_FALSE(proto::WritesCheckpoints(JobConfigFor(options)));
}

TEST(CoordinatorOptions, ABuddyReplicaIsKeptUnlessTurnedOff) {
  CoordinatorOptions options = Valid();
  ASSERT_OK(ValidateAndComplete(&options));
  EXPECT_EQ(JobConfigFor(options).replicas(), 1);
  options.replicas = 0;
  ASSERT_OK(ValidateAndComplete(&options));
  EXPECT_EQ(JobConfigFor(options).replicas(), 0);
  for (int bad : {-1, 2}) {
    options.replicas = bad;
    EXPECT_THAT(ValidateAndComplete(&options),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("--replicas=", bad,
                                                ": 0 (one copy of each "
                                                "shard) or 1"))));
  }
}

}  // namespace
}  // namespace coordinator
}  // namespace starling
