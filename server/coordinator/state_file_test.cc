#include "server/coordinator/state_file.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace coordinator {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

proto::CoordinatorState Example() {
  proto::CoordinatorState state;
  state.set_job_id("job-a");
  state.set_group_epoch(3);
  state.set_group_key(std::string(32, '\x5a'));
  for (int i = 0; i < 2; ++i) {
    proto::JoinRequest* member = state.add_members();
    member->set_hostname(absl::StrCat("node-", i));
    member->set_data_address(absl::StrCat("10.0.0.", i, ":29500"));
  }
  state.mutable_runs()->set_next_run_id(7);
  return state;
}

std::string Contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void Overwrite(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

TEST(StateFile, AFirstStartFindsNoRecord) {
  StateFile file(TempPath("absent.state"));
  ASSERT_OK_AND_ASSIGN(auto state, file.Read());
  EXPECT_FALSE(state.has_value());
}

TEST(StateFile, ReadsBackWhatItWrote) {
  StateFile file(TempPath("round_trip.state"));
  ASSERT_OK(file.Write(Example()));
  ASSERT_OK_AND_ASSIGN(auto state, file.Read());
  ASSERT_TRUE(state.has_value());
  EXPECT_EQ(state->SerializeAsString(), Example().SerializeAsString());
  // A second write replaces the record whole.
  proto::CoordinatorState next = Example();
  next.set_group_epoch(4);
  ASSERT_OK(file.Write(next));
  ASSERT_OK_AND_ASSIGN(state, file.Read());
  EXPECT_EQ(state->group_epoch(), 4u);
}

TEST(StateFile, ARecordThatDoesNotCheckIsDataLossNamingTheFile) {
  const std::string path = TempPath("corrupt.state");
  StateFile file(path);
  ASSERT_OK(file.Write(Example()));
  const std::string good = Contents(path);

  std::string flipped = good;
  flipped.back() ^= 0x01;
  Overwrite(path, flipped);
  EXPECT_THAT(file.Read(), StatusIs(absl::StatusCode::kDataLoss,
                                    AllOf(HasSubstr(path), HasSubstr("SHA-256"),
                                          HasSubstr("move it away"))));

  Overwrite(path, good.substr(0, good.size() - 3));
  EXPECT_THAT(file.Read(), StatusIs(absl::StatusCode::kDataLoss,
                                    HasSubstr("the header announces")));

  Overwrite(path, "not a record\n");
  EXPECT_THAT(file.Read(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("first line")));
}

TEST(StateFile, AFailedWriteLeavesThePreviousRecord) {
  const std::string path = TempPath("kept.state");
  StateFile file(path);
  ASSERT_OK(file.Write(Example()));
  // The temporary file cannot be created: a folder is in its way.
  ASSERT_EQ(::mkdir((path + ".tmp").c_str(), 0700), 0);
  proto::CoordinatorState next = Example();
  next.set_group_epoch(9);
  EXPECT_THAT(file.Write(next), StatusIs(absl::StatusCode::kFailedPrecondition,
                                         HasSubstr(path + ".tmp")));
  ASSERT_OK_AND_ASSIGN(auto state, file.Read());
  ASSERT_TRUE(state.has_value());
  EXPECT_EQ(state->group_epoch(), 3u);
}

}  // namespace
}  // namespace coordinator
}  // namespace starling
