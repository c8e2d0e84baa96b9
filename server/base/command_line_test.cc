// --config files: their syntax, how they set flags, where a command line's
// flags win, and the errors that name the file and line.
#include "server/base/command_line.h"

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

ABSL_FLAG(int, test_port, 29400, "a port");
ABSL_FLAG(std::string, test_name, "", "a name");
ABSL_FLAG(bool, test_switch, false, "a switch");
ABSL_FLAG(absl::Duration, test_wait, absl::Seconds(1), "a wait");

namespace starling {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// Writes `text` to a fresh file under the test's temporary directory.
std::string WriteFile(const std::string& text) {
  static int counter = 0;
  const std::string path = absl::StrCat(::testing::TempDir(), "/config_",
                                        getpid(), "_", counter++, ".conf");
  std::FILE* f = std::fopen(path.c_str(), "w");
  EXPECT_NE(f, nullptr);
  if (f == nullptr) return path;
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  return path;
}

// argv for ParseProgramCommandLine and friends; owns the strings.
class Args {
 public:
  explicit Args(std::vector<std::string> args) : strings_(std::move(args)) {
    for (std::string& s : strings_) pointers_.push_back(s.data());
    pointers_.push_back(nullptr);
  }
  int argc() const { return static_cast<int>(strings_.size()); }
  char** argv() { return pointers_.data(); }

 private:
  std::vector<std::string> strings_;
  std::vector<char*> pointers_;
};

MATCHER_P3(Setting, name, value, line, "") {
  return arg.name == name && arg.value == value && arg.line == line &&
         arg.has_value;
}

TEST(ParseConfigText, ReadsBothFormsCommentsAndBlankLines) {
  absl::StatusOr<std::vector<ConfigSetting>> settings = ParseConfigText(
      "# a comment\n"
      "\n"
      "--test_port=29500\n"
      "  test_name = node 0  \n"
      "\t# indented comment\n"
      "-test_wait=5s\n"
      "--test_other value-after-space\n"
      "test_hash=a#b\n",
      "f.conf");
  ASSERT_THAT(settings, IsOk());
  EXPECT_THAT(*settings,
              ElementsAre(Setting("test_port", "29500", 3),
                          Setting("test_name", "node 0", 4),
                          Setting("test_wait", "5s", 6),
                          Setting("test_other", "value-after-space", 7),
                          Setting("test_hash", "a#b", 8)));
}

// `job_id = demo   # our job` once became the job "demo   # our job".
TEST(ParseConfigText, ACommentAfterAValueIsNotPartOfIt) {
  absl::StatusOr<std::vector<ConfigSetting>> settings = ParseConfigText(
      "job_id = demo   # our job\n"
      "--port=29400\t# the default\n"
      "quoted = \"a # b\"  # kept inside quotes\n"
      "--insecure  # a lone boolean\n"
      "empty =   # nothing\n",
      "f.conf");
  ASSERT_THAT(settings, IsOk());
  ASSERT_EQ(settings->size(), 5u);
  EXPECT_THAT((*settings)[0], Setting("job_id", "demo", 1));
  EXPECT_THAT((*settings)[1], Setting("port", "29400", 2));
  EXPECT_THAT((*settings)[2], Setting("quoted", "a # b", 3));
  EXPECT_EQ((*settings)[3].name, "insecure");
  EXPECT_FALSE((*settings)[3].has_value);
  EXPECT_THAT((*settings)[4], Setting("empty", "", 5));
}

// A key set twice used to keep the last value without a word.
TEST(ParseConfigText, AFlagSetTwiceInOneFileNamesBothLines) {
  EXPECT_THAT(
      ParseConfigText("port = 1\n# later\n--port=2\n", "/etc/x.conf"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("/etc/x.conf:3: --port is set again (first on line "
                         "1); set it once")));
}

TEST(ParseConfigText, AnOpenQuoteIsAnError) {
  EXPECT_THAT(ParseConfigText("name = \"abc\n", "x.conf"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("x.conf:1: --name: a quoted value must end "
                                 "with its quote")));
  EXPECT_THAT(
      ParseConfigText("name = 'a' b\n", "x.conf"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("x.conf:1:")));
}

// Binary or huge lines are named, escaped and cut, not echoed.
TEST(ParseConfigText, AnErrorShowsTheLineEscapedAndCut) {
  const std::string binary =
      std::string("\x1b[31m\x01", 6) + std::string(100000, 'x');
  const absl::Status status = ParseConfigText(binary, "x.conf").status();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_LT(status.message().size(), 300u);
  EXPECT_THAT(std::string(status.message()), HasSubstr("\\x1b[31m\\x01xx"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("(100006 bytes)"));
  EXPECT_THAT(std::string(status.message()), Not(HasSubstr("\x1b")));
}

TEST(ParseConfigText, QuotesAllowEmptyAndPaddedValues) {
  absl::StatusOr<std::vector<ConfigSetting>> settings =
      ParseConfigText("test_name = \"\"\ntest_other = ' x '\n", "f.conf");
  ASSERT_THAT(settings, IsOk());
  EXPECT_THAT(*settings, ElementsAre(Setting("test_name", "", 1),
                                     Setting("test_other", " x ", 2)));
}

TEST(ParseConfigText, CarriageReturnsAreIgnored) {
  absl::StatusOr<std::vector<ConfigSetting>> settings =
      ParseConfigText("--test_port=1\r\n--test_switch\r\n", "f.conf");
  ASSERT_THAT(settings, IsOk());
  ASSERT_EQ(settings->size(), 2u);
  EXPECT_EQ((*settings)[0].value, "1");
  EXPECT_EQ((*settings)[1].name, "test_switch");
  EXPECT_FALSE((*settings)[1].has_value);
}

TEST(ParseConfigText, ALineThatIsNoSettingNamesFileAndLine) {
  EXPECT_THAT(ParseConfigText("--test_port=1\n= 5\n", "/etc/x.conf"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("/etc/x.conf:2: expected --flag=value")));
  EXPECT_THAT(
      ParseConfigText("\n\n--\n", "x.conf"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("x.conf:3:")));
  EXPECT_THAT(
      ParseConfigText("a.b = 1\n", "x.conf"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("x.conf:1:")));
}

class ApplyConfigFileTest : public ::testing::Test {
 private:
  absl::FlagSaver saver_;  // every test starts from the defaults
};

TEST_F(ApplyConfigFileTest, SetsEveryFlag) {
  const std::string path = WriteFile(
      "--test_port=29501\ntest_name = node-1\ntest_wait = 2m\n--test_switch\n");
  ASSERT_THAT(ApplyConfigFile(path), IsOk());
  EXPECT_EQ(absl::GetFlag(FLAGS_test_port), 29501);
  EXPECT_EQ(absl::GetFlag(FLAGS_test_name), "node-1");
  EXPECT_EQ(absl::GetFlag(FLAGS_test_wait), absl::Minutes(2));
  EXPECT_TRUE(absl::GetFlag(FLAGS_test_switch));
}

TEST_F(ApplyConfigFileTest, NegatedBoolean) {
  absl::SetFlag(&FLAGS_test_switch, true);
  ASSERT_THAT(ApplyConfigFile(WriteFile("--notest_switch\ntest_port = 2\n")),
              IsOk());
  EXPECT_FALSE(absl::GetFlag(FLAGS_test_switch));
  EXPECT_EQ(absl::GetFlag(FLAGS_test_port), 2);
}

// --config=/dev/zero once grew a program's memory at about 1 GB/s.
TEST_F(ApplyConfigFileTest, AnEndlessOrHugeFileIsRefused) {
  const absl::Status zero = ApplyConfigFile("/dev/zero");
  EXPECT_THAT(zero, StatusIs(absl::StatusCode::kInvalidArgument,
                             HasSubstr("/dev/zero: more than 1048576 bytes: "
                                       "not a config file")));
  const std::string big = WriteFile(std::string(kMaxConfigBytes + 1, '#'));
  EXPECT_THAT(ApplyConfigFile(big), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("not a config file")));
}

TEST_F(ApplyConfigFileTest, UnknownFlagNamesFileAndLine) {
  const std::string path =
      WriteFile("# header\n--test_port=1\n--tset_port=2\n");
  EXPECT_THAT(
      ApplyConfigFile(path),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr(absl::StrCat(path, ":3: unknown flag 'tset_port'"))));
}

TEST_F(ApplyConfigFileTest, BadValueNamesFileLineAndFlag) {
  const std::string path = WriteFile("test_port = many\n");
  EXPECT_THAT(
      ApplyConfigFile(path),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr(absl::StrCat(path, ":1: --test_port=many: "))));
  const std::string wait = WriteFile("\ntest_wait = 5 parsecs\n");
  EXPECT_THAT(ApplyConfigFile(wait),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat(wait, ":2: --test_wait="))));
}

TEST_F(ApplyConfigFileTest, LoneNonBooleanNeedsAValue) {
  const std::string path = WriteFile("--test_port\n");
  EXPECT_THAT(
      ApplyConfigFile(path),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr(absl::StrCat(path, ":1: --test_port needs a value"))));
}

TEST_F(ApplyConfigFileTest, MissingFileIsNotFoundNamingIt) {
  const std::string path = ::testing::TempDir() + "/no-such.conf";
  EXPECT_THAT(ApplyConfigFile(path),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr(absl::StrCat(path, ": cannot read config"))));
}

TEST_F(ApplyConfigFileTest, NestedConfigAndAbseilFlagsAreRefused) {
  const std::string nested = WriteFile("--config=/etc/other.conf\n");
  EXPECT_THAT(ApplyConfigFile(nested),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat(nested, ":1: --config cannot"))));
  const std::string abseil = WriteFile("flagfile = /etc/other.flags\n");
  EXPECT_THAT(
      ApplyConfigFile(abseil),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr(absl::StrCat(abseil, ":1: unknown flag 'flagfile'"))));
}

TEST(ConfigFilesFromArgs, FindsEveryFormInOrderUpToDoubleDash) {
  Args args({"prog", "--config=a.conf", "-x", "--config", "b.conf",
             "-config=c.conf", "positional", "--", "--config=d.conf"});
  absl::StatusOr<std::vector<std::string>> files =
      ConfigFilesFromArgs(args.argc(), args.argv());
  ASSERT_THAT(files, IsOk());
  EXPECT_THAT(*files, ElementsAre("a.conf", "b.conf", "c.conf"));
}

TEST(ConfigFilesFromArgs, MissingFileNameIsAnError) {
  Args trailing({"prog", "--config"});
  EXPECT_THAT(ConfigFilesFromArgs(trailing.argc(), trailing.argv()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  Args empty({"prog", "--config="});
  EXPECT_THAT(ConfigFilesFromArgs(empty.argc(), empty.argv()),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// ParseProgramCommandLine sets process-wide usage state that may be set only
// once, so each case runs it in a child process (a death test) that exits 0
// when the flags came out as expected.
ProgramInfo TestProgram() {
  return {"starling-test", "server/base/command_line_test.cc", "v0",
          "usage: starling-test [--config=FILE]"};
}

void ParseAndCheck(std::vector<std::string> arguments, int port,
                   const std::string& name) {
  Args args(std::move(arguments));
  ParseProgramCommandLine(TestProgram(), args.argc(), args.argv());
  const bool ok = absl::GetFlag(FLAGS_test_port) == port &&
                  absl::GetFlag(FLAGS_test_name) == name;
  std::fprintf(stderr, "port=%d name=%s\n", absl::GetFlag(FLAGS_test_port),
               absl::GetFlag(FLAGS_test_name).c_str());
  std::exit(ok ? 0 : 3);
}

class ParseProgramCommandLineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::testing::FLAGS_gtest_death_test_style = "threadsafe";
    config_ = WriteFile("test_port = 1000\ntest_name = from-file\n");
  }
  std::string config_;
};

TEST_F(ParseProgramCommandLineTest, ConfigSetsFlags) {
  EXPECT_EXIT(ParseAndCheck({"prog", "--config=" + config_}, 1000, "from-file"),
              ::testing::ExitedWithCode(0), "port=1000 name=from-file");
}

TEST_F(ParseProgramCommandLineTest, CommandLineWinsBeforeOrAfterConfig) {
  EXPECT_EXIT(ParseAndCheck({"prog", "--config=" + config_, "--test_port=7"}, 7,
                            "from-file"),
              ::testing::ExitedWithCode(0), "port=7");
  EXPECT_EXIT(ParseAndCheck({"prog", "--test_port=8", "--config", config_}, 8,
                            "from-file"),
              ::testing::ExitedWithCode(0), "port=8");
}

TEST_F(ParseProgramCommandLineTest, LaterConfigFilesWinOverEarlierOnes) {
  const std::string second = WriteFile("test_name = second\n");
  EXPECT_EXIT(
      ParseAndCheck({"prog", "--config=" + config_, "--config=" + second}, 1000,
                    "second"),
      ::testing::ExitedWithCode(0), "name=second");
}

TEST_F(ParseProgramCommandLineTest, BadConfigExitsTwoNamingFileAndLine) {
  const std::string bad = WriteFile("test_port = 1\n\nnot_a_flag = 3\n");
  EXPECT_EXIT(ParseAndCheck({"prog", "--config=" + bad}, 0, ""),
              ::testing::ExitedWithCode(2),
              "starling-test: .*:3: unknown flag 'not_a_flag'");
  EXPECT_EXIT(ParseAndCheck({"prog", "--config=/nonexistent/x.conf"}, 0, ""),
              ::testing::ExitedWithCode(2),
              "starling-test: /nonexistent/x.conf: cannot read config file");
}

TEST_F(ParseProgramCommandLineTest, HelpListsConfig) {
  EXPECT_EXIT(
      {
        dup2(2, 1);  // --help prints on stdout; the death test reads stderr
        ParseAndCheck({"prog", "--help"}, 0, "");
      },
      [](int) { return true; }, "--config \\(file of flags");
}

}  // namespace
}  // namespace starling
