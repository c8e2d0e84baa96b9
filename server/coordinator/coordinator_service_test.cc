// The coordinator over real gRPC on 127.0.0.1: every call has a deadline.
#include "server/coordinator/coordinator_service.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/base/clock.h"
#include "server/base/grpc_status.h"
#include "server/base/status_matchers.h"
#include "server/coordinator/job_status_table.h"

namespace starling {
namespace coordinator {
namespace {

using ::testing::HasSubstr;

class CoordinatorServiceTest : public ::testing::Test {
 protected:
  void Start(int nodes) {
    CoordinatorOptions options;
    options.job_id = "grpc-job";
    options.expected_nodes = nodes;
    options.parameter_count = 4096;
    options.partitions_per_epoch = 64;
    ASSERT_OK_AND_ASSIGN(coordinator_,
                         Coordinator::Create(options, &clock_, &registry_));
    service_ = std::make_unique<CoordinatorService>(coordinator_.get());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    stub_ = proto::Coordinator::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (coordinator_ != nullptr) coordinator_->Shutdown();
    if (server_ != nullptr) {
      server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    }
  }

  static proto::JoinRequest JoinRequestFor(int i) {
    proto::JoinRequest request;
    request.set_job_id("grpc-job");
    request.set_hostname(absl::StrCat("host", i));
    request.set_data_address(absl::StrCat("127.0.0.1:", 30000 + i));
    request.set_admin_address(absl::StrCat("127.0.0.1:", 31000 + i));
    request.set_version(kStarlingVersion);
    return request;
  }

  absl::Status Join(const proto::JoinRequest& request, absl::Duration deadline,
                    proto::JoinResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    return FromGrpcStatus(stub_->Join(&context, request, response), "join");
  }

  FakeClock clock_;
  metrics::MetricsRegistry registry_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<proto::Coordinator::Stub> stub_;
};

TEST_F(CoordinatorServiceTest, FourNodesRendezvousOverGrpc) {
  Start(4);
  std::vector<proto::JoinResponse> responses(4);
  std::vector<absl::Status> statuses(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      statuses[i] = Join(JoinRequestFor(i), absl::Seconds(20), &responses[i]);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 4; ++i) {
    ASSERT_OK(statuses[i]);
    EXPECT_EQ(responses[i].rank(), i);
    EXPECT_EQ(responses[i].peers_size(), 4);
    EXPECT_EQ(responses[i].shard_map(i).end_element() -
                  responses[i].shard_map(i).begin_element(),
              1024u);
  }

  grpc::ClientContext beat_context;
  beat_context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  proto::HeartbeatRequest beat;
  beat.set_job_id("grpc-job");
  beat.set_rank(1);
  proto::HeartbeatResponse beat_response;
  ASSERT_OK(
      FromGrpcStatus(stub_->Heartbeat(&beat_context, beat, &beat_response)));
  EXPECT_FALSE(beat_response.degraded());

  grpc::ClientContext schedule_context;
  schedule_context.set_deadline(
      absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  proto::GetScheduleRequest schedule_request;
  schedule_request.set_job_id("grpc-job");
  schedule_request.set_rank(3);
  proto::Schedule schedule;
  ASSERT_OK(FromGrpcStatus(
      stub_->GetSchedule(&schedule_context, schedule_request, &schedule)));
  EXPECT_EQ(schedule.iteration_count(), 16);
  EXPECT_EQ(schedule.iterations(0).assignments(0).partitions(0), 3u);

  grpc::ClientContext report_context;
  report_context.set_deadline(
      absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  proto::StepReport report;
  report.set_job_id("grpc-job");
  report.set_rank(0);
  report.set_iteration(1);
  report.set_error("boom");
  proto::StepReportAck ack;
  ASSERT_OK(FromGrpcStatus(stub_->ReportStep(&report_context, report, &ack)));

  grpc::ClientContext status_context;
  status_context.set_deadline(
      absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  proto::JobStatus status;
  ASSERT_OK(FromGrpcStatus(stub_->GetJobStatus(&status_context, {}, &status)));
  EXPECT_EQ(status.group_size(), 4);
  EXPECT_THAT(FormatJobStatusTable(status),
              HasSubstr("3     host3     127.0.0.1:30003  HEALTHY"));
  EXPECT_THAT(status.last_error(), HasSubstr("iteration 1: boom"));
}

TEST_F(CoordinatorServiceTest, JoinDeadlineCarriesTheRendezvousProgress) {
  Start(2);
  proto::JoinResponse response;
  const absl::Time start = absl::Now();
  EXPECT_THAT(Join(JoinRequestFor(0), absl::Milliseconds(600), &response),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("1 of 2 nodes have joined (host0)")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_F(CoordinatorServiceTest, WaitTimeoutShortensTheWait) {
  Start(2);
  proto::JoinRequest request = JoinRequestFor(0);
  request.set_wait_timeout_ms(100);
  proto::JoinResponse response;
  const absl::Time start = absl::Now();
  EXPECT_THAT(Join(request, absl::Seconds(20), &response),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("1 of 2 nodes have joined")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_F(CoordinatorServiceTest, ErrorsKeepTheirCodeOverTheWire) {
  Start(2);
  proto::JoinRequest request = JoinRequestFor(0);
  request.set_version("9.9.9");
  proto::JoinResponse response;
  EXPECT_THAT(Join(request, absl::Seconds(5), &response),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "join: node host0 (127.0.0.1:30000) runs starling "
                       "9.9.9, coordinator runs 0.1.0"));
  request = JoinRequestFor(0);
  request.set_job_id("other");
  EXPECT_THAT(Join(request, absl::Seconds(5), &response),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("names job 'other'")));
}

}  // namespace
}  // namespace coordinator
}  // namespace starling
