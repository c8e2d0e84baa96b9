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

// What a member reports in free text reaches status bounded and printable:
// an escape sequence in a worker name or an error does not reach the
// operator's terminal, a flood of worker entries or a 1 MB error does not
// swell every status answer.
TEST_F(CoordinatorServiceTest, ReportsReachStatusBoundedAndPrintable) {
  Start(1);
  proto::JoinResponse joined;
  ASSERT_OK(Join(JoinRequestFor(0), absl::Seconds(20), &joined));
  proto::HeartbeatRequest beat;
  beat.set_job_id("grpc-job");
  beat.set_rank(0);
  for (int i = 0; i < 75000; ++i) {
    proto::WorkerStatus* worker = beat.add_workers();
    worker->set_index(i);
    worker->set_name("\x1b[2J\x1b[31mowned");
    worker->set_state(proto::WorkerStatus::STATE_ATTACHED);
  }
  beat.set_transport("\x1b[2Jtcp" + std::string(1 << 16, 'x'));
  grpc::ClientContext beat_context;
  beat_context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  proto::HeartbeatResponse answer;
  ASSERT_OK(FromGrpcStatus(stub_->Heartbeat(&beat_context, beat, &answer)));
  proto::StepReport report;
  report.set_job_id("grpc-job");
  report.set_rank(0);
  report.set_iteration(1);
  report.set_error("\x1b]0;title\x07" + std::string(1 << 20, 'x'));
  grpc::ClientContext report_context;
  report_context.set_deadline(
      absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  proto::StepReportAck ack;
  ASSERT_OK(FromGrpcStatus(stub_->ReportStep(&report_context, report, &ack)));

  grpc::ClientContext status_context;
  status_context.set_deadline(
      absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  proto::JobStatus status;
  ASSERT_OK(FromGrpcStatus(stub_->GetJobStatus(&status_context, {}, &status)));
  ASSERT_EQ(status.nodes_size(), 1);
  EXPECT_EQ(status.nodes(0).workers_size(), 4096);
  EXPECT_EQ(status.nodes(0).workers(0).name(), "?[2J?[31mowned");
  EXPECT_THAT(status.nodes(0).transport(), testing::StartsWith("?[2Jtcpxxx"));
  EXPECT_LT(status.nodes(0).transport().size(), 512u);
  EXPECT_LT(status.ByteSizeLong(), size_t{1} << 20);
  EXPECT_THAT(status.last_error(), HasSubstr("?]0;title?xxx"));
  EXPECT_THAT(status.last_error(),
              HasSubstr(absl::StrCat("... (", report.error().size() - 4096,
                                     " more bytes)")));
  for (char c : status.last_error()) {
    EXPECT_TRUE(c >= 0x20 && c <= 0x7e) << static_cast<int>(c);
  }
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

TEST_F(CoordinatorServiceTest, RunsBeginAndEndOverGrpc) {
  Start(2);
  std::vector<proto::JoinResponse> joins(2);
  {
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i) {
      threads.emplace_back([&, i] {
        EXPECT_OK(Join(JoinRequestFor(i), absl::Seconds(20), &joins[i]));
      });
    }
    for (std::thread& t : threads) t.join();
  }
  // A lone BeginRun times out with the coordinator's own message.
  {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
    proto::BeginRunRequest request;
    request.set_job_id("grpc-job");
    request.set_rank(0);
    request.set_wait_timeout_ms(100);
    proto::BeginRunResponse response;
    EXPECT_THAT(
        FromGrpcStatus(stub_->BeginRun(&context, request, &response)),
        StatusIs(absl::StatusCode::kDeadlineExceeded,
                 HasSubstr("rank 1 has not ended its declarations (1 of 2 "
                           "ranks waiting)")));
  }
  std::vector<proto::BeginRunResponse> runs(2);
  std::vector<absl::Status> statuses(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
      proto::BeginRunRequest request;
      request.set_job_id("grpc-job");
      request.set_rank(rank);
      request.set_group_epoch(joins[rank].group_epoch());
      request.set_local_workers(1);
      request.set_next_op_seq(3);
      proto::TensorSpec* spec = request.add_tensors();
      spec->set_name("w");
      spec->add_shape(4096);
      spec->set_dtype(proto::DATA_TYPE_FLOAT32);
      statuses[rank] =
          FromGrpcStatus(stub_->BeginRun(&context, request, &runs[rank]));
    });
  }
  for (std::thread& t : threads) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_OK(statuses[rank]);
    EXPECT_EQ(runs[rank].run_id(), 1u);
    EXPECT_EQ(runs[rank].first_op_seq(), 4u);
    EXPECT_EQ(runs[rank].total_workers(), 2);
  }
  grpc::ClientContext end_context;
  end_context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  proto::EndRunRequest end;
  end.set_job_id("grpc-job");
  end.set_rank(1);
  end.set_run_id(1);
  end.set_state(proto::RunStatus::STATE_FAILED);
  end.set_failed_step(2);
  end.set_error("boom");
  proto::EndRunResponse end_response;
  ASSERT_OK(FromGrpcStatus(stub_->EndRun(&end_context, end, &end_response)));

  grpc::ClientContext status_context;
  status_context.set_deadline(
      absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  proto::JobStatus status;
  ASSERT_OK(FromGrpcStatus(stub_->GetJobStatus(&status_context, {}, &status)));
  EXPECT_THAT(FormatJobStatusTable(status),
              HasSubstr("  run 1 FAILED after 0 steps (2 workers, 4096 "
                        "parameters, 0.0s): rank 1 (host1, 127.0.0.1:30001) "
                        "step 2: boom\n"));
}

TEST_F(CoordinatorServiceTest, RejoinOverGrpcAdoptsTheGroup) {
  Start(1);
  proto::RejoinRequest request;
  *request.mutable_node() = JoinRequestFor(0);
  request.set_rank(0);
  request.set_group_epoch(3);
  proto::PeerInfo* peer = request.add_peers();
  peer->set_rank(0);
  peer->set_hostname("host0");
  peer->set_data_address("127.0.0.1:30000");
  request.mutable_run()->set_run_id(9);
  request.mutable_run()->set_state(proto::RunStatus::STATE_RUNNING);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  proto::JoinResponse response;
  ASSERT_OK(FromGrpcStatus(stub_->Rejoin(&context, request, &response)));
  EXPECT_EQ(response.group_epoch(), 3u);
  EXPECT_EQ(response.rank(), 0);
  EXPECT_EQ(response.config().parameter_count(), 4096u);
}

}  // namespace
}  // namespace coordinator
}  // namespace starling
