// The control plane end to end at its smallest: a Coordinator service
// answering Join and GetJobStatus over a real gRPC channel on loopback,
// every call with a deadline. The real coordinator replaces the in-test
// service in //server/coordinator; the wire contract stays this one.
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "server/base/grpc_status.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace {

using ::testing::HasSubstr;

constexpr char kVersion[] = "0.1.0";

// Hands out ranks in join order; refuses other versions.
class TestCoordinator final : public proto::Coordinator::Service {
 public:
  grpc::Status Join(grpc::ServerContext*, const proto::JoinRequest* request,
                    proto::JoinResponse* response) override {
    if (request->version() != kVersion) {
      return ToGrpcStatus(absl::FailedPreconditionError(
          absl::StrCat("node ", request->hostname(), " runs starling ",
                       request->version(), ", coordinator runs ", kVersion)));
    }
    const int rank = next_rank_++;
    response->set_rank(rank);
    response->set_group_size(2);
    proto::PeerInfo* peer = response->add_peers();
    peer->set_rank(rank);
    peer->set_data_address(request->data_address());
    response->mutable_config()->set_iterations_per_schedule(16);
    return grpc::Status::OK;
  }

  // Never answers before the client gives up: exercises deadlines.
  grpc::Status GetJobStatus(grpc::ServerContext* context,
                            const proto::GetJobStatusRequest*,
                            proto::JobStatus*) override {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (!context->IsCancelled() && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
  }

 private:
  std::atomic<int> next_rank_{0};
};

class GrpcRoundTripTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                       grpc::InsecureChannelCredentials());
    stub_ = proto::Coordinator::NewStub(channel);
  }

  void TearDown() override {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(2));
  }

  static void SetDeadline(grpc::ClientContext* context, absl::Duration d) {
    context->set_deadline(absl::ToChronoTime(absl::Now() + d));
  }

  TestCoordinator service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<proto::Coordinator::Stub> stub_;
};

TEST_F(GrpcRoundTripTest, JoinAssignsRanksInOrder) {
  for (int expected = 0; expected < 2; ++expected) {
    grpc::ClientContext context;
    SetDeadline(&context, absl::Seconds(10));
    proto::JoinRequest request;
    request.set_job_id("roundtrip");
    request.set_hostname(absl::StrCat("node", expected));
    request.set_data_address(absl::StrCat("127.0.0.1:", 29500 + expected));
    request.set_version(kVersion);
    proto::JoinResponse response;
    ASSERT_OK(FromGrpcStatus(stub_->Join(&context, request, &response)));
    EXPECT_EQ(response.rank(), expected);
    EXPECT_EQ(response.group_size(), 2);
    ASSERT_EQ(response.peers_size(), 1);
    EXPECT_EQ(response.peers(0).data_address(), request.data_address());
    EXPECT_EQ(response.config().iterations_per_schedule(), 16);
  }
}

TEST_F(GrpcRoundTripTest, VersionMismatchIsRefusedNamingBothVersions) {
  grpc::ClientContext context;
  SetDeadline(&context, absl::Seconds(10));
  proto::JoinRequest request;
  request.set_hostname("old-node");
  request.set_version("0.0.9");
  proto::JoinResponse response;
  EXPECT_THAT(
      FromGrpcStatus(stub_->Join(&context, request, &response), "join"),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               "join: node old-node runs starling 0.0.9, coordinator runs "
               "0.1.0"));
}

TEST_F(GrpcRoundTripTest, DeadlineBoundsASilentServer) {
  grpc::ClientContext context;
  SetDeadline(&context, absl::Milliseconds(300));
  proto::GetJobStatusRequest request;
  proto::JobStatus response;
  const absl::Time start = absl::Now();
  EXPECT_THAT(
      FromGrpcStatus(stub_->GetJobStatus(&context, request, &response),
                     "status"),
      StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("status: ")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(GrpcStatus, ConversionKeepsCodeAndMessage) {
  const absl::Status original =
      absl::UnavailableError("rank 3 (10.77.0.4:29503) closed the connection");
  EXPECT_THAT(FromGrpcStatus(ToGrpcStatus(original)),
              StatusIs(absl::StatusCode::kUnavailable,
                       "rank 3 (10.77.0.4:29503) closed the connection"));
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

}  // namespace
}  // namespace starling
