// Malformed and hostile messages against the control plane's real gRPC
// services, sent the way a fuzzer sends them but bounded and deterministic
// (fixed seeds, a fixed number per handler), over a real channel on
// 127.0.0.1. It proves that:
//  - the coordinator (Coordinator + CoordinatorService) answers every
//    request of each of its eight handlers, whatever it holds (random bytes,
//    random wire format, byte mutations of valid requests including invalid
//    UTF-8 in string fields, fields set to extremes, 1 MiB strings, control
//    bytes, thousands of repeated entries): no crash, no hang; a request that
//    parses reaches the handler and is answered by the coordinator itself,
//    one that does not parse is refused before it;
//  - every error it answers has a message of at most 8 KiB without raw
//    control bytes, so that what a caller sends can neither swell an answer
//    nor rewrite the terminal of whoever reads the error;
//  - afterwards its real members are unaffected and still work; hostile
//    Joins take no slot in a forming group; with a cluster secret no call
//    without a credential reaches its state;
//  - the node admin service of a daemon still joining answers UNAVAILABLE to
//    whatever it is sent.
// The inputs come from hostile_input.h, the raw calls and the checks on
// their answers from raw_calls.h. A crash fails the test: everything runs in
// this process.
#include <cstdint>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/message.h"
#include "google/protobuf/stubs/logging.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/node_admin.grpc.pb.h"
#include "server/base/call_credential.h"
#include "server/base/clock.h"
#include "server/base/logging.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_service.h"
#include "server/metrics/metrics_registry.h"
#include "server/node/node_admin_service.h"
#include "tests/security/hostile_input.h"
#include "tests/security/raw_calls.h"

namespace starling {
namespace testing_security {
namespace {

namespace pb = ::google::protobuf;
using coordinator::Coordinator;
using coordinator::CoordinatorOptions;
using coordinator::CoordinatorService;

constexpr char kJob[] = "fuzz-job";

// Protobuf's log handler for the test: drops every line.
void DropProtobufLog(pb::LogLevel, const char*, int, const std::string&) {}

// --- The services on loopback -----------------------------------------------

proto::JoinRequest MemberJoin(int i, const std::string& version) {
  proto::JoinRequest request;
  request.set_job_id(kJob);
  request.set_hostname(absl::StrCat("member-", i));
  request.set_data_address(absl::StrCat("127.0.0.1:", 30000 + i));
  request.set_admin_address(absl::StrCat("127.0.0.1:", 31000 + i));
  request.set_version(version);
  request.mutable_capabilities()->set_local_workers(1);
  return request;
}

class MalformedRequestsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Protobuf logs each string that is not UTF-8, on both ends of a call.
    previous_protobuf_log_ = pb::SetLogHandler(&DropProtobufLog);
    SetLogSinkForTesting(
        [this](LogSeverity, absl::string_view line) { logs_.Note(line); });
  }

  void TearDown() override {
    if (coordinator_ != nullptr) coordinator_->Shutdown();
    if (server_ != nullptr) {
      server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    }
    SetLogSinkForTesting(nullptr);
    pb::SetLogHandler(previous_protobuf_log_);
    std::cout << "coordinator: " << logs_.Summary() << std::endl;
  }

  // Serves a coordinator of `options` (job kJob; the group of
  // `expected_nodes`) on 127.0.0.1, port 0.
  void StartCoordinator(int expected_nodes, const std::string& secret = "") {
    CoordinatorOptions options;
    options.job_id = kJob;
    options.expected_nodes = expected_nodes;
    options.partitions_per_epoch = 64;
    options.iterations_per_schedule = 4;
    options.rejoin_grace = absl::Hours(1);
    options.cluster_secret = secret;
    absl::StatusOr<std::unique_ptr<Coordinator>> made =
        Coordinator::Create(options, &clock_, &registry_);
    ASSERT_TRUE(made.ok()) << made.status();
    coordinator_ = *std::move(made);
    service_ = std::make_unique<CoordinatorService>(coordinator_.get());
    Serve(service_.get());
    stub_ = proto::Coordinator::NewStub(channel_);
    plausible_ = {kJob, version(), "127.0.0.1:1", "stranger", "w"};
  }

  void Serve(grpc::Service* service) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials());
    raw_ = std::make_unique<RawCaller>(channel_);
  }

  std::string version() const { return coordinator_->options().version; }

  template <typename Request, typename Response, typename Method>
  grpc::Status Typed(Method method, const Request& request, Response* out) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
    return (stub_.get()->*method)(&context, request, out);
  }

  // Members 0..n-1 join at once; their answers by member.
  std::vector<proto::JoinResponse> JoinMembers(int n) {
    std::vector<proto::JoinResponse> joined(n);
    std::vector<grpc::Status> statuses(n);
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        statuses[i] = Typed(&proto::Coordinator::Stub::Join,
                            MemberJoin(i, version()), &joined[i]);
      });
    }
    for (std::thread& t : threads) t.join();
    for (int i = 0; i < n; ++i) {
      EXPECT_TRUE(statuses[i].ok())
          << "member " << i << ": " << statuses[i].error_message();
    }
    return joined;
  }

  // The eight coordinator handlers with valid requests from member 0 of
  // the group `joined` describes (or a forming group if it is empty).
  std::vector<Handler> CoordinatorHandlers(const proto::JoinResponse& joined) {
    const std::string prefix = "/starling.proto.Coordinator/";
    const uint64_t epoch = joined.group_epoch();
    std::vector<Handler> handlers;
    const auto add = [&](const char* name, std::unique_ptr<pb::Message> valid,
                         const pb::Message& response_type) {
      handlers.push_back({prefix + name, std::move(valid), &response_type});
    };

    auto join = std::make_unique<proto::JoinRequest>(MemberJoin(0, version()));
    join->set_hostname("stranger");
    join->set_data_address("127.0.0.1:1");
    join->set_wait_timeout_ms(50);
    add("Join", std::move(join), proto::JoinResponse::default_instance());

    auto beat = std::make_unique<proto::HeartbeatRequest>();
    beat->set_job_id(kJob);
    beat->set_group_epoch(epoch);
    beat->set_iteration(3);
    proto::WorkerStatus* worker = beat->add_workers();
    worker->set_name("worker-0");
    worker->set_state(proto::WorkerStatus::STATE_ATTACHED);
    add("Heartbeat", std::move(beat),
        proto::HeartbeatResponse::default_instance());

    auto schedule = std::make_unique<proto::GetScheduleRequest>();
    schedule->set_job_id(kJob);
    schedule->set_group_epoch(epoch);
    add("GetSchedule", std::move(schedule),
        proto::Schedule::default_instance());

    auto report = std::make_unique<proto::StepReport>();
    report->set_job_id(kJob);
    report->set_group_epoch(epoch);
    report->set_iteration(1);
    report->set_compute_seconds(0.25);
    report->set_communication_seconds(0.125);
    report->set_loss(1.5);
    add("ReportStep", std::move(report),
        proto::StepReportAck::default_instance());

    auto status = std::make_unique<proto::GetJobStatusRequest>();
    status->set_job_id(kJob);
    add("GetJobStatus", std::move(status),
        proto::JobStatus::default_instance());

    auto rejoin = std::make_unique<proto::RejoinRequest>();
    *rejoin->mutable_node() = MemberJoin(0, version());
    rejoin->set_group_epoch(epoch == 0 ? 1 : epoch);
    if (joined.peers_size() > 0) {
      *rejoin->mutable_peers() = joined.peers();
      *rejoin->mutable_shard_map() = joined.shard_map();
    } else {
      rejoin->add_peers()->set_data_address(rejoin->node().data_address());
    }
    add("Rejoin", std::move(rejoin), proto::JoinResponse::default_instance());

    auto begin = std::make_unique<proto::BeginRunRequest>(BeginFor(epoch));
    begin->set_wait_timeout_ms(50);
    add("BeginRun", std::move(begin),
        proto::BeginRunResponse::default_instance());

    auto end = std::make_unique<proto::EndRunRequest>();
    end->set_job_id(kJob);
    end->set_group_epoch(epoch);
    end->set_run_id(1);
    end->set_state(proto::RunStatus::STATE_FINISHED);
    end->set_steps(1);
    add("EndRun", std::move(end), proto::EndRunResponse::default_instance());
    return handlers;
  }

  static proto::BeginRunRequest BeginFor(uint64_t epoch) {
    proto::BeginRunRequest begin;
    begin.set_job_id(kJob);
    begin.set_group_epoch(epoch);
    begin.set_local_workers(1);
    begin.set_next_op_seq(1);
    proto::TensorSpec* spec = begin.add_tensors();
    spec->set_name("w");
    spec->add_shape(10);
    spec->set_dtype(proto::DATA_TYPE_FLOAT32);
    return begin;
  }

  // The job as the coordinator sees it, from the class itself (no
  // credential needed), without the time of the answer.
  proto::JobStatus StatusNow() {
    absl::StatusOr<proto::JobStatus> status = coordinator_->GetJobStatus({});
    EXPECT_TRUE(status.ok()) << status.status();
    proto::JobStatus out = status.ok() ? *status : proto::JobStatus();
    out.clear_status_unix_seconds();
    return out;
  }

  FakeClock clock_;
  metrics::MetricsRegistry registry_;
  LogTally logs_;
  pb::LogHandler* previous_protobuf_log_ = nullptr;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<node::NodeAdminService> admin_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<RawCaller> raw_;
  std::unique_ptr<proto::Coordinator::Stub> stub_;
  std::vector<std::string> plausible_;
};

// A formed group of one (so that a BeginRun is decided at once and the
// run book sees every hostile table) takes 3000 hostile requests on each of
// the eight handlers: each is answered by the coordinator or refused
// before it, every error is bounded and printable, and afterwards the
// group is the one that formed and its member still heartbeats, gets its
// schedule, and begins and ends a run.
TEST_F(MalformedRequestsTest, CoordinatorSurvivesAndStaysUsable) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1));
  const std::vector<proto::JoinResponse> joined = JoinMembers(1);
  ASSERT_EQ(joined.size(), 1u);
  const proto::JoinResponse& member = joined[0];
  ASSERT_EQ(member.group_size(), 1);

  Findings findings;
  uint64_t seed = 0x5ec0'0001;
  for (const Handler& handler : CoordinatorHandlers(member)) {
    Drive(raw_.get(), handler, 3000, seed++, plausible_, Rules(), &findings);
  }
  EXPECT_EQ(findings.total(), 0) << findings.Summary();

  // The group is the one that formed.
  proto::JobStatus status;
  ASSERT_TRUE(Typed(&proto::Coordinator::Stub::GetJobStatus,
                    proto::GetJobStatusRequest(), &status)
                  .ok());
  EXPECT_EQ(status.job_id(), kJob);
  EXPECT_TRUE(status.formed());
  EXPECT_EQ(status.group_size(), 1);
  EXPECT_EQ(status.group_epoch(), member.group_epoch());
  ASSERT_EQ(status.nodes_size(), 1) << "no hostile Join is left waiting";
  EXPECT_EQ(status.nodes(0).peer().data_address(),
            member.peers(0).data_address());
  EXPECT_EQ(status.nodes(0).peer().health(), proto::NODE_HEALTH_HEALTHY);

  // Its member still works.
  proto::HeartbeatRequest beat;
  beat.set_job_id(kJob);
  beat.set_group_epoch(member.group_epoch());
  proto::HeartbeatResponse beat_answer;
  grpc::Status call =
      Typed(&proto::Coordinator::Stub::Heartbeat, beat, &beat_answer);
  ASSERT_TRUE(call.ok()) << call.error_message();
  EXPECT_FALSE(beat_answer.degraded());
  proto::GetScheduleRequest ask;
  ask.set_job_id(kJob);
  ask.set_group_epoch(member.group_epoch());
  proto::Schedule schedule;
  call = Typed(&proto::Coordinator::Stub::GetSchedule, ask, &schedule);
  ASSERT_TRUE(call.ok()) << call.error_message();
  EXPECT_EQ(schedule.first_iteration(), 0u);
  EXPECT_GT(schedule.iteration_count(), 0);

  proto::BeginRunResponse begun;
  call = Typed(&proto::Coordinator::Stub::BeginRun,
               BeginFor(member.group_epoch()), &begun);
  ASSERT_TRUE(call.ok()) << call.error_message();
  EXPECT_GE(begun.run_id(), 1u) << "run ids are numbered from 1";
  EXPECT_EQ(begun.parameter_count(), 10u);
  proto::EndRunRequest end;
  end.set_job_id(kJob);
  end.set_group_epoch(member.group_epoch());
  end.set_run_id(begun.run_id());
  end.set_state(proto::RunStatus::STATE_FINISHED);
  end.set_steps(5);
  proto::EndRunResponse ended;
  call = Typed(&proto::Coordinator::Stub::EndRun, end, &ended);
  EXPECT_TRUE(call.ok()) << "ending run " << begun.run_id() << ": "
                         << call.error_message();
  ASSERT_TRUE(Typed(&proto::Coordinator::Stub::GetJobStatus,
                    proto::GetJobStatusRequest(), &status)
                  .ok());
  ASSERT_GE(status.recent_runs_size(), 1);
  EXPECT_EQ(status.recent_runs(0).run_id(), begun.run_id());
  EXPECT_EQ(status.recent_runs(0).state(), proto::RunStatus::STATE_FINISHED);
}

// While a group of two forms, hostile requests on every handler (none of
// them a Join or Rejoin that could rightly take a slot or adopt a group)
// leave no node waiting, and then the two real members form the group
// with ranks 0 and 1 as if nothing had happened.
TEST_F(MalformedRequestsTest, HostileJoinsTakeNoSlotInAFormingGroup) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(2));
  const std::string right_version = version();
  const auto could_take_a_slot = [&](const pb::Message& message) {
    const auto* join = dynamic_cast<const proto::JoinRequest*>(&message);
    const auto* rejoin = dynamic_cast<const proto::RejoinRequest*>(&message);
    if (rejoin != nullptr) join = &rejoin->node();
    return join != nullptr && join->job_id() == kJob &&
           join->version() == right_version;
  };
  Findings findings;
  uint64_t seed = 0x5ec0'0101;
  for (const Handler& handler : CoordinatorHandlers(proto::JoinResponse())) {
    Drive(raw_.get(), handler, 600, seed++, plausible_, Rules(), &findings,
          could_take_a_slot);
  }
  EXPECT_EQ(findings.total(), 0) << findings.Summary();

  proto::JobStatus status = StatusNow();
  EXPECT_EQ(status.job_id(), kJob);
  EXPECT_FALSE(status.formed());
  EXPECT_EQ(status.nodes_size(), 0) << status.DebugString();

  const std::vector<proto::JoinResponse> joined = JoinMembers(2);
  ASSERT_EQ(joined.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(joined[i].rank(), i);
    EXPECT_EQ(joined[i].group_size(), 2);
    ASSERT_EQ(joined[i].peers_size(), 2);
    EXPECT_EQ(joined[i].peers(i).hostname(), absl::StrCat("member-", i));
  }
  status = StatusNow();
  EXPECT_TRUE(status.formed());
  EXPECT_EQ(status.group_size(), 2);
  EXPECT_EQ(status.nodes_size(), 2);
}

// With a cluster secret, every request that parses on every handler, sent
// without a credential or with a made-up one (random text, or shaped like
// a credential), is refused with PERMISSION_DENIED by the coordinator
// itself, bounded and printable, and none changes the job's state.
TEST_F(MalformedRequestsTest, WithAClusterSecretNoUncredentialedCallGetsIn) {
  ASSERT_NO_FATAL_FAILURE(
      StartCoordinator(2, "malformed-requests-test cluster secret"));
  const proto::JobStatus before = StatusNow();
  const auto metadata = [](HostileInput* input) {
    Metadata out;
    if (input->OneIn(3)) return out;
    out.emplace_back(kCallerHostKey, input->MetadataValue());
    out.emplace_back(kCallerAddressKey, input->MetadataValue());
    out.emplace_back(kCallCredentialKey, input->MetadataValue());
    return out;
  };
  Rules rules;
  rules.code = grpc::StatusCode::PERMISSION_DENIED;
  Findings findings;
  uint64_t seed = 0x5ec0'0201;
  for (const Handler& handler : CoordinatorHandlers(proto::JoinResponse())) {
    Drive(raw_.get(), handler, 300, seed++, plausible_, rules, &findings,
          nullptr, metadata);
  }
  EXPECT_EQ(findings.total(), 0) << findings.Summary();
  const proto::JobStatus after = StatusNow();
  EXPECT_EQ(after.SerializeAsString(), before.SerializeAsString())
      << "before: " << before.DebugString() << "after: " << after.DebugString();
}

// A member that reports the end of a run with the largest run id (a
// corrupt daemon's EndRun, or a hostile one without a cluster secret)
// must not wrap the coordinator's run counter: the next run still gets an
// id >= 1 and its member can end it.
TEST_F(MalformedRequestsTest, LargestRunIdDoesNotWrapTheRunCounter) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1));
  const std::vector<proto::JoinResponse> joined = JoinMembers(1);
  ASSERT_EQ(joined.size(), 1u);
  const uint64_t epoch = joined[0].group_epoch();
  const auto end_run = [&](uint64_t run_id) {
    proto::EndRunRequest end;
    end.set_job_id(kJob);
    end.set_group_epoch(epoch);
    end.set_run_id(run_id);
    end.set_state(proto::RunStatus::STATE_FINISHED);
    end.set_steps(1);
    proto::EndRunResponse ended;
    return Typed(&proto::Coordinator::Stub::EndRun, end, &ended);
  };
  // Refused or recorded: either way the counter must survive it.
  const grpc::Status hostile = end_run(std::numeric_limits<uint64_t>::max());
  std::cout << "EndRun of run 2^64-1: code " << hostile.error_code() << " "
            << hostile.error_message() << std::endl;

  proto::BeginRunResponse begun;
  grpc::Status call =
      Typed(&proto::Coordinator::Stub::BeginRun, BeginFor(epoch), &begun);
  ASSERT_TRUE(call.ok()) << call.error_message();
  EXPECT_GE(begun.run_id(), 1u) << "run ids are numbered from 1";
  call = end_run(begun.run_id());
  EXPECT_TRUE(call.ok()) << "ending run " << begun.run_id() << ": "
                         << call.error_message();
}

// A node daemon serves its admin service before it joins: until then each
// of its four handlers answers any request, whatever bytes it holds, with
// UNAVAILABLE "still joining", bounded and printable.
TEST_F(MalformedRequestsTest, NodeAdminStillJoiningAnswersUnavailable) {
  admin_ = std::make_unique<node::NodeAdminService>();
  ASSERT_NO_FATAL_FAILURE(Serve(admin_.get()));
  const std::string prefix = "/starling.proto.NodeAdmin/";
  std::vector<Handler> handlers;
  handlers.push_back({prefix + "GetStatus",
                      std::make_unique<proto::GetNodeStatusRequest>(),
                      &proto::NodeStatusReply::default_instance()});
  handlers.push_back({prefix + "ListShards",
                      std::make_unique<proto::ListShardsRequest>(),
                      &proto::ListShardsReply::default_instance()});
  handlers.push_back({prefix + "GetGroup",
                      std::make_unique<proto::GetGroupRequest>(),
                      &proto::GroupReply::default_instance()});
  handlers.push_back({prefix + "GetCollectives",
                      std::make_unique<proto::GetCollectivesRequest>(),
                      &proto::CollectivesReply::default_instance()});
  Rules rules;
  rules.marked = false;
  rules.code = grpc::StatusCode::UNAVAILABLE;
  Findings findings;
  uint64_t seed = 0x5ec0'0301;
  for (const Handler& handler : handlers) {
    Drive(raw_.get(), handler, 500, seed++, {"x"}, rules, &findings);
  }
  EXPECT_EQ(findings.total(), 0) << findings.Summary();

  auto stub = proto::NodeAdmin::NewStub(channel_);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  proto::NodeStatusReply reply;
  const grpc::Status status =
      stub->GetStatus(&context, proto::GetNodeStatusRequest(), &reply);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "still joining"))
      << status.error_message();
}

}  // namespace
}  // namespace testing_security
}  // namespace starling
