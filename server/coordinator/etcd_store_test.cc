// The coordinator's record in a real etcd (Debian's etcd-server, started
// on loopback by each test suite): read back whole, one writer enforced, a
// value that is not a record refused by name, members that cannot be
// reached named, endpoints tried in turn, and what is not etcd recognised.
#include "server/coordinator/etcd_store.h"

#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "server/base/status_matchers.h"
#include "server/coordinator/etcd_test_server.h"
#include "server/coordinator/test_binaries.h"

namespace starling {
namespace coordinator {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

proto::CoordinatorState Example(uint64_t epoch) {
  proto::CoordinatorState state;
  state.set_job_id("job-a");
  state.set_group_epoch(epoch);
  state.set_group_key(std::string(32, '\x5a'));
  for (int i = 0; i < 3; ++i) {
    proto::JoinRequest* member = state.add_members();
    member->set_hostname(absl::StrCat("node-", i));
    member->set_data_address(absl::StrCat("10.0.0.", i, ":29500"));
  }
  state.mutable_runs()->set_next_run_id(7);
  return state;
}

class EtcdStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    etcd_ = new EtcdTestServer();
    const absl::Status started = etcd_->Start();
    ASSERT_TRUE(started.ok()) << started;
  }
  static void TearDownTestSuite() {
    delete etcd_;
    etcd_ = nullptr;
  }

  // A key of this test's own.
  static std::string Key() {
    return absl::StrCat(
        "/starling-test/",
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }

  std::unique_ptr<EtcdStore> Store(const std::string& endpoints) {
    absl::StatusOr<std::unique_ptr<EtcdStore>> store =
        EtcdStore::Create(endpoints, Key(), absl::Seconds(2));
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  static EtcdTestServer* etcd_;
};

EtcdTestServer* EtcdStoreTest::etcd_ = nullptr;

TEST_F(EtcdStoreTest, AFirstStartFindsNoRecord) {
  auto store = Store(etcd_->client_url());
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto state, store->Read());
  EXPECT_FALSE(state.has_value());
  EXPECT_EQ(store->revision(), 0);
}

TEST_F(EtcdStoreTest, AnotherCoordinatorReadsBackWhatOneWrote) {
  auto first = Store(etcd_->client_url());
  ASSERT_NE(first, nullptr);
  ASSERT_OK_AND_ASSIGN(auto none, first->Read());
  ASSERT_FALSE(none.has_value());
  ASSERT_OK(first->Write(Example(3)));
  // Each write replaces the record whole.
  ASSERT_OK(first->Write(Example(4)));
  EXPECT_GT(first->revision(), 0);

  // A coordinator started afresh (another process, another host) on the
  // same key.
  auto second = Store(etcd_->client_url());
  ASSERT_NE(second, nullptr);
  ASSERT_OK_AND_ASSIGN(auto state, second->Read());
  ASSERT_TRUE(state.has_value());
  EXPECT_EQ(state->SerializeAsString(), Example(4).SerializeAsString());
  EXPECT_EQ(second->revision(), first->revision());
  EXPECT_THAT(second->where(),
              AllOf(HasSubstr(Key()), HasSubstr(etcd_->client_url())));
}

TEST_F(EtcdStoreTest, OnlyTheCoordinatorThatReadLastWrites) {
  auto old_one = Store(etcd_->client_url());
  ASSERT_NE(old_one, nullptr);
  ASSERT_OK(old_one->Read().status());
  ASSERT_OK(old_one->Write(Example(1)));

  // A second coordinator of the job takes over: it reads and writes.
  auto new_one = Store(etcd_->client_url());
  ASSERT_NE(new_one, nullptr);
  ASSERT_OK(new_one->Read().status());
  ASSERT_OK(new_one->Write(Example(2)));

  // The old one's next write is refused, saying why; the record is the
  // new one's.
  EXPECT_THAT(old_one->Write(Example(9)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr(Key()), HasSubstr("someone else"),
                             HasSubstr("second coordinator"))));
  auto reader = Store(etcd_->client_url());
  ASSERT_NE(reader, nullptr);
  ASSERT_OK_AND_ASSIGN(auto state, reader->Read());
  ASSERT_TRUE(state.has_value());
  EXPECT_EQ(state->group_epoch(), 2u);
  // The new one writes on.
  EXPECT_OK(new_one->Write(Example(3)));
}

TEST_F(EtcdStoreTest, AValueThatIsNotARecordIsDataLossNamingTheKey) {
  auto store = Store(etcd_->client_url());
  ASSERT_NE(store, nullptr);
  ASSERT_OK(store->Write(Example(1)));
  ASSERT_OK_AND_ASSIGN(auto state, store->Read());
  ASSERT_OK(etcd_->Put(Key(), "not a record\n"));
  EXPECT_THAT(store->Read(),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(Key()), HasSubstr("first line"),
                             HasSubstr("etcdctl del"))));
}

TEST_F(EtcdStoreTest, NoMemberAnsweringIsUnavailableNamingEachEndpoint) {
  const OccupiedPort silent;  // listens, never answers
  const int closed = PickFreePort();
  const std::string endpoints =
      absl::StrCat("http://127.0.0.1:", closed, ",127.0.0.1:", silent.port());
  auto store = Store(endpoints);
  ASSERT_NE(store, nullptr);
  const absl::Time began = absl::Now();
  EXPECT_THAT(
      store->Read(),
      StatusIs(absl::StatusCode::kUnavailable,
               AllOf(HasSubstr(absl::StrCat("127.0.0.1:", closed)),
                     HasSubstr(absl::StrCat("127.0.0.1:", silent.port())),
                     HasSubstr("no etcd member answered"))));
  // Each endpoint had its 2 s at most.
  EXPECT_LT(absl::Now() - began, absl::Seconds(10));
}

TEST_F(EtcdStoreTest, AnEndpointThatCannotBeReachedIsPassedOver) {
  const int closed = PickFreePort();
  auto store = Store(
      absl::StrCat("http://127.0.0.1:", closed, ",", etcd_->client_url()));
  ASSERT_NE(store, nullptr);
  ASSERT_OK(store->Read().status());
  ASSERT_OK(store->Write(Example(5)));
  ASSERT_OK_AND_ASSIGN(auto state, store->Read());
  ASSERT_TRUE(state.has_value());
  EXPECT_EQ(state->group_epoch(), 5u);
}

TEST_F(EtcdStoreTest, AServerThatIsNotEtcdIsNamedAsSuch) {
  httplib::Server web;
  web.Post(".*", [](const httplib::Request&, httplib::Response& reply) {
    reply.set_content("<html>\x1b[31mhello</html>", "text/html");
  });
  const int port = web.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&] { web.listen_after_bind(); });
  auto store = Store(absl::StrCat("127.0.0.1:", port));
  ASSERT_NE(store, nullptr);
  const absl::StatusOr<std::optional<proto::CoordinatorState>> read =
      store->Read();
  web.stop();
  serving.join();
  EXPECT_THAT(read, StatusIs(absl::StatusCode::kInternal,
                             AllOf(HasSubstr("not an etcd v3 reply"),
                                   HasSubstr("<html>"))));
  // The terminal escape it sent is shown escaped.
  EXPECT_THAT(read.status().message(), Not(HasSubstr(std::string(1, '\x1b'))));
}

TEST(EtcdStoreCreate, EndpointsThatAreNotHostAndPortAreRefusedByName) {
  EXPECT_THAT(
      EtcdStore::Create("", "/k").status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no endpoint")));
  for (const char* bad : {"127.0.0.1", "127.0.0.1:0", "127.0.0.1:99999",
                          "ftp://h:1", "http://h:2379/v3"}) {
    EXPECT_THAT(EtcdStore::Create(bad, "/k").status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("--state_etcd"), HasSubstr(bad))))
        << bad;
  }
  EXPECT_EQ(EtcdStore::KeyFor("/starling/jobs/", "demo"),
            "/starling/jobs/demo");
}

}  // namespace
}  // namespace coordinator
}  // namespace starling
