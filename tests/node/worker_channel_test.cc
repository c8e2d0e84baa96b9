// The worker <-> daemon channel end to end in one process: the real client
// library against the daemon's real WorkerServer, with a scripted handler
// in place of the daemon's engines. Checks the pool hand-over (the daemon
// reads the worker's buffer in place and writes pulls into it), futures
// (Poll, Then, Wait with a deadline), errors with context, and a daemon
// that goes away.
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/framed_socket.h"
#include "server/node/worker/worker_server.h"
#include "server/node/worker/worker_session.h"

namespace starling {
namespace {

using ::testing::HasSubstr;

// Answers like a daemon of rank 5 with 2 local workers; holds pushes until
// ReleasePush().
class ScriptedDaemon : public node::WorkerRequestHandler {
 public:
  absl::StatusOr<proto::HelloReply> Attach(
      const node::WorkerHandle&, const proto::HelloRequest& hello) override {
    absl::MutexLock lock(&mu_);
    if (hello.worker_index() >= 2) {
      return absl::InvalidArgumentError("worker index out of range");
    }
    if (!attached_.insert(hello.worker_index()).second) {
      return absl::AlreadyExistsError(
          absl::StrCat("worker index ", hello.worker_index(), " is taken"));
    }
    proto::HelloReply reply;
    reply.set_rank(5);
    reply.set_group_size(2);
    reply.set_local_workers(2);
    reply.set_daemon_address("127.0.0.1:1234");
    return reply;
  }

  void Handle(const node::WorkerHandle& worker,
              const proto::WorkerRequest& request) override {
    switch (request.kind_case()) {
      case proto::WorkerRequest::kCommitTensors: {
        proto::WorkerResponse response;
        response.mutable_commit()->set_total_workers(4);
        worker.responder->Reply(request.id(), absl::OkStatus(), response);
        return;
      }
      case proto::WorkerRequest::kPushGradients: {
        absl::StatusOr<absl::Span<float>> data =
            worker.pool->Floats(request.push_gradients().slices(0));
        absl::MutexLock lock(&mu_);
        seen_ = std::vector<float>(data->begin(), data->end());
        held_worker_ = worker;
        held_id_ = request.id();
        pushed_.Notify();
        return;
      }
      case proto::WorkerRequest::kPullParameters: {
        absl::StatusOr<absl::Span<float>> data =
            worker.pool->Floats(request.pull_parameters().slices(0));
        for (float& v : *data) v = 7.0f;
        worker.responder->Reply(request.id(), absl::OkStatus());
        return;
      }
      case proto::WorkerRequest::kBarrier:
        worker.responder->Reply(request.id(), absl::InvalidArgumentError(
                                                  "barrier refused for test"));
        return;
      default:
        worker.responder->Reply(request.id(), absl::OkStatus());
    }
  }

  void Detach(const node::WorkerHandle& worker) override {
    absl::MutexLock lock(&mu_);
    attached_.erase(worker.index);
  }

  void ReleasePush() {
    absl::MutexLock lock(&mu_);
    held_worker_.responder->Reply(held_id_, absl::OkStatus());
  }

  std::vector<float> seen() {
    absl::MutexLock lock(&mu_);
    return seen_;
  }

  absl::Notification pushed_;

 private:
  absl::Mutex mu_;
  std::set<int> attached_ ABSL_GUARDED_BY(mu_);
  std::vector<float> seen_ ABSL_GUARDED_BY(mu_);
  node::WorkerHandle held_worker_ ABSL_GUARDED_BY(mu_);
  uint64_t held_id_ ABSL_GUARDED_BY(mu_) = 0;
};

class WorkerChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = absl::StrCat("/tmp/starling-channel-test-", ::getpid(), ".sock");
    absl::StatusOr<std::unique_ptr<node::WorkerServer>> server =
        node::WorkerServer::Start(path_, &daemon_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  std::unique_ptr<client::Client> Connect(int index) {
    client::ClientOptions options;
    options.socket_path = path_;
    options.worker_index = index;
    options.timeout = absl::Seconds(5);
    options.pool_bytes = 1 << 16;
    absl::StatusOr<std::unique_ptr<client::Client>> c =
        client::Client::Connect(options);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  ScriptedDaemon daemon_;
  std::string path_;
  std::unique_ptr<node::WorkerServer> server_;
};

TEST_F(WorkerChannelTest, DaemonReadsAndWritesTheWorkersPoolInPlace) {
  std::unique_ptr<client::Client> c = Connect(0);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->rank(), 5);
  EXPECT_EQ(c->daemon_address(), "127.0.0.1:1234");
  ASSERT_TRUE(c->DeclareTensor("w", {3}, client::DataType::kFloat32).ok());
  absl::StatusOr<absl::Span<float>> w = c->AllocateTensor("w");
  ASSERT_TRUE(w.ok());
  (*w)[0] = 1;
  (*w)[1] = 2;
  (*w)[2] = 3;

  client::Future push = c->PushGradientsAsync(0, {{"w", *w}});
  EXPECT_EQ(c->total_workers(), 4);  // the declarations ended first
  ASSERT_TRUE(daemon_.pushed_.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_EQ(daemon_.seen(), (std::vector<float>{1, 2, 3}));
  EXPECT_FALSE(push.Poll());
  absl::Status wait = push.Wait(absl::Milliseconds(50));
  EXPECT_EQ(wait.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(wait.message()), HasSubstr("push_gradients step 0"));

  absl::Notification called;
  push.Then([&called](const absl::Status& status) {
    EXPECT_TRUE(status.ok()) << status;
    called.Notify();
  });
  daemon_.ReleasePush();
  EXPECT_TRUE(push.Wait(absl::Seconds(5)).ok());
  EXPECT_TRUE(called.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_TRUE(push.Poll());

  ASSERT_TRUE(c->PullParameters(1, {{"w", *w}}).ok());
  EXPECT_EQ((*w)[0], 7.0f);
  EXPECT_EQ((*w)[2], 7.0f);
}

TEST_F(WorkerChannelTest, BufferOutsideThePoolIsRefused) {
  std::unique_ptr<client::Client> c = Connect(0);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->DeclareTensor("w", {3}, client::DataType::kFloat32).ok());
  std::vector<float> mine(3);
  absl::Status status = c->PushGradients(4, {{"w", absl::MakeSpan(mine)}});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("not in the client's shared-memory pool"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("tensor 'w'"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("step 4"));
}

TEST_F(WorkerChannelTest, DaemonErrorsCarryTheOpAndWhere) {
  std::unique_ptr<client::Client> c = Connect(1);
  ASSERT_NE(c, nullptr);
  absl::Status status = c->Barrier();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("barrier refused"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("worker 1 of rank 5"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("127.0.0.1:1234"));
}

// ClientOptions::timeout bounds a synchronous push that the daemon does not
// answer (its step waits for a worker of another node, say): the worker
// gets DeadlineExceeded naming the op, not a wait of the daemon's choosing.
TEST_F(WorkerChannelTest, SyncPushIsBoundedByTheClientTimeout) {
  client::ClientOptions options;
  options.socket_path = path_;
  options.worker_index = 0;
  options.timeout = absl::Milliseconds(300);
  options.pool_bytes = 1 << 16;
  absl::StatusOr<std::unique_ptr<client::Client>> c =
      client::Client::Connect(options);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->DeclareTensor("w", {3}, client::DataType::kFloat32).ok());
  absl::StatusOr<absl::Span<float>> w = (*c)->AllocateTensor("w");
  ASSERT_TRUE(w.ok());
  const absl::Time start = absl::Now();
  const absl::Status status = (*c)->PushGradients(0, {{"w", *w}});
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("push_gradients step 0"));
  EXPECT_GE(took, absl::Milliseconds(300));
  EXPECT_LT(took, absl::Seconds(3));
  ASSERT_TRUE(daemon_.pushed_.WaitForNotificationWithTimeout(absl::Seconds(5)));
  // The late answer is dropped; the connection still serves.
  daemon_.ReleasePush();
  EXPECT_TRUE((*c)->PullParameters(1, {{"w", *w}}).ok());
}

// A second worker with index 0 while `first` holds it.
absl::StatusOr<std::unique_ptr<client::Client>> ConnectSecondIndexZero(
    const std::string& path) {
  client::ClientOptions options;
  options.socket_path = path;
  options.worker_index = 0;
  options.timeout = absl::Seconds(5);
  return client::Client::Connect(options);
}

TEST_F(WorkerChannelTest, TakenWorkerIndexIsRefused) {
  std::unique_ptr<client::Client> first = Connect(0);
  ASSERT_NE(first, nullptr);
  absl::StatusOr<std::unique_ptr<client::Client>> second =
      ConnectSecondIndexZero(path_);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
}

// A refused hello holds no slot and starts no reader, so the error comes
// at once: the orderly close's wait for the daemon (2 s) is not taken.
TEST_F(WorkerChannelTest, RefusedHelloFailsAtOnce) {
  std::unique_ptr<client::Client> first = Connect(0);
  ASSERT_NE(first, nullptr);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<client::Client>> second =
      ConnectSecondIndexZero(path_);
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_LT(took, absl::Seconds(1));
}

TEST_F(WorkerChannelTest, DaemonGoingAwayFailsPendingFutures) {
  std::unique_ptr<client::Client> c = Connect(0);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->DeclareTensor("w", {3}, client::DataType::kFloat32).ok());
  absl::StatusOr<absl::Span<float>> w = c->AllocateTensor("w");
  ASSERT_TRUE(w.ok());
  client::Future push = c->PushGradientsAsync(0, {{"w", *w}});
  ASSERT_TRUE(daemon_.pushed_.WaitForNotificationWithTimeout(absl::Seconds(5)));
  server_->Stop();
  absl::Status status = push.Wait(absl::Seconds(5));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("connection to the node daemon lost"));
  // Later ops fail at once with the same error.
  EXPECT_EQ(c->PushGradients(1, {{"w", *w}}).code(),
            absl::StatusCode::kUnavailable);
}

// A worker that does not seal its pool could truncate it under the daemon
// (which would then die of SIGBUS on its next access): refused at Hello.
TEST_F(WorkerChannelTest, UnsealedPoolIsRefusedAtHello) {
  const int pool = ::memfd_create("unsealed", MFD_CLOEXEC);
  ASSERT_GE(pool, 0);
  ASSERT_EQ(::ftruncate(pool, 4096), 0);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path_.data(), path_.size());
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  proto::WorkerRequest hello;
  hello.mutable_hello()->set_worker_name("unsealed");
  hello.mutable_hello()->set_pool_bytes(4096);
  ASSERT_TRUE(WriteFrame(fd, hello.SerializeAsString(), pool).ok());
  absl::StatusOr<Frame> frame = ReadFrame(fd);
  ASSERT_TRUE(frame.ok()) << frame.status();
  proto::WorkerResponse response;
  ASSERT_TRUE(response.ParseFromString(frame->payload));
  EXPECT_EQ(response.code(),
            static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(response.message(), HasSubstr("F_SEAL_SHRINK"));
  ::close(fd);
  ::close(pool);
  // The daemon serves the next worker as before.
  EXPECT_NE(Connect(0), nullptr);
}

// A request that decodes but carries a value out of bounds (an accuracy of
// NaN or 2 from a C++ worker, once) is answered with the error on that
// request; the session lives on. Before, the daemon closed it, and the run
// waited out the worker's grace and failed.
TEST_F(WorkerChannelTest, AnInvalidValueIsAnsweredAndTheSessionLivesOn) {
  const int pool = ::memfd_create("sealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(pool, 0);
  ASSERT_EQ(::ftruncate(pool, 4096), 0);
  ASSERT_EQ(::fcntl(pool, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path_.data(), path_.size());
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const auto answer = [fd](const proto::WorkerRequest& request, int pass_fd) {
    EXPECT_TRUE(WriteFrame(fd, request.SerializeAsString(), pass_fd).ok());
    absl::StatusOr<Frame> frame = ReadFrame(fd);
    proto::WorkerResponse response;
    EXPECT_TRUE(frame.ok()) << frame.status();
    if (frame.ok()) {
      EXPECT_TRUE(response.ParseFromString(frame->payload));
    }
    return response;
  };
  proto::WorkerRequest hello;
  hello.set_id(1);
  hello.mutable_hello()->set_worker_name("raw");
  hello.mutable_hello()->set_pool_bytes(4096);
  ASSERT_EQ(answer(hello, pool).code(), 0);
  for (const double accuracy : {2.0, std::nan("")}) {
    proto::WorkerRequest push;
    push.set_id(7);
    push.mutable_push_gradients()->set_step(0);
    push.mutable_push_gradients()->set_accuracy(accuracy);
    const proto::WorkerResponse refused = answer(push, -1);
    EXPECT_EQ(refused.id(), 7u);
    EXPECT_EQ(refused.code(),
              static_cast<int>(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(refused.message(), HasSubstr("must be a fraction in 0..1"));
  }
  // The same session is served: the next request is answered.
  proto::WorkerRequest finish;
  finish.set_id(8);
  finish.mutable_finish();
  const proto::WorkerResponse done = answer(finish, -1);
  EXPECT_EQ(done.id(), 8u);
  EXPECT_EQ(done.code(), 0) << done.message();
  ::close(fd);
  ::close(pool);
}

TEST_F(WorkerChannelTest, ClientPoolCannotBeShrunk) {
  std::unique_ptr<client::Client> c = Connect(0);
  ASSERT_NE(c, nullptr);
  // The pool's memfd is the only memfd this process made through the
  // client: find it in /proc/self/fd and try to truncate it.
  bool found = false;
  for (int fd = 3; fd < 1024; ++fd) {
    char link[256] = {};
    const std::string path = absl::StrCat("/proc/self/fd/", fd);
    if (::readlink(path.c_str(), link, sizeof(link) - 1) < 0) continue;
    if (std::string(link).find("starling-client-pool") == std::string::npos) {
      continue;
    }
    found = true;
    EXPECT_NE(::ftruncate(fd, 0), 0);
    EXPECT_EQ(errno, EPERM);
  }
  EXPECT_TRUE(found);
}

TEST(WorkerServer, PathThatIsARegularFileIsRefusedAndLeftAlone) {
  const std::string path =
      absl::StrCat("/tmp/starling-channel-file-", ::getpid());
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("precious", f);
    std::fclose(f);
  }
  absl::StatusOr<std::unique_ptr<node::WorkerServer>> server =
      node::WorkerServer::Listen(path);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(server.status().message()),
              HasSubstr("a regular file"));
  struct stat st = {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 8);  // untouched
  ::unlink(path.c_str());
  ::unlink((path + ".lock").c_str());
}

TEST(WorkerServer, SecondDaemonOnALiveSocketIsRefusedAndTheFirstServesOn) {
  const std::string path =
      absl::StrCat("/tmp/starling-channel-twice-", ::getpid(), ".sock");
  absl::StatusOr<std::unique_ptr<node::WorkerServer>> first =
      node::WorkerServer::Listen(path);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::unique_ptr<node::WorkerServer>> second =
      node::WorkerServer::Listen(path);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr(path));
  struct stat st = {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  (*first)->Stop();
  ::unlink((path + ".lock").c_str());
}

TEST(WorkerChannel, UnreachableSocketFailsWithinTheTimeout) {
  client::ClientOptions options;
  options.socket_path = "/tmp/starling-no-such-daemon.sock";
  options.timeout = absl::Milliseconds(300);
  absl::StatusOr<std::unique_ptr<client::Client>> c =
      client::Client::Connect(options);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("/tmp/starling-no-such-daemon.sock"));
}

}  // namespace
}  // namespace starling
