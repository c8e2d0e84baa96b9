#include "server/base/command_line.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/base/logging.h"

// Read by ParseProgramCommandLine straight from argv (before Abseil parses
// the command line); defined so that Abseil accepts it and --help lists it.
ABSL_FLAG(std::string, config, "",
          "file of flags set before the command line's, so that a flag given "
          "on the command line wins: one --flag=value or `flag = value` per "
          "line, # starts a comment line; may be repeated");

namespace starling {
namespace {

constexpr char kThisFile[] = "server/base/command_line.cc";

absl::Status LineError(absl::string_view file, int line,
                       absl::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat(file, ":", line, ": ", message));
}

bool IsFlagName(absl::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '_') return false;
  }
  return true;
}

// Abseil's own flags (--flagfile, --help, --undefok, ...) are not settings a
// config file may hold.
bool IsAbseilFlag(const absl::CommandLineFlag& flag) {
  return absl::StrContains(flag.Filename(), "absl/");
}

// At most this many characters of a file's text in an error, control
// characters and non-ASCII bytes escaped: a binary or huge line is named,
// not echoed.
std::string Printable(absl::string_view text, size_t most = 80) {
  const bool cut = text.size() > most;
  std::string out = absl::CHexEscape(text.substr(0, most));
  if (cut) absl::StrAppend(&out, "... (", text.size(), " bytes)");
  return out;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) {
    const int error = errno;
    const std::string message =
        absl::StrCat(path, ": cannot read config file: ", std::strerror(error));
    switch (error) {
      case ENOENT:
        return absl::NotFoundError(message);
      case EACCES:
        return absl::PermissionDeniedError(message);
      default:
        return absl::InvalidArgumentError(message);
    }
  }
  std::string text;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), f)) > 0) {
    text.append(buffer, n);
    if (text.size() > kMaxConfigBytes) break;  // /dev/zero, a disk image
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) {
    return absl::DataLossError(
        absl::StrCat(path, ": error while reading config file"));
  }
  if (text.size() > kMaxConfigBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": more than ", kMaxConfigBytes,
                     " bytes: not a config file (one flag per line)"));
  }
  return text;
}

}  // namespace

absl::StatusOr<std::vector<ConfigSetting>> ParseConfigText(
    absl::string_view text, absl::string_view file) {
  std::vector<ConfigSetting> settings;
  std::map<std::string, int> first_line;  // name -> line that set it
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    absl::string_view rest = absl::StripAsciiWhitespace(line);
    if (rest.empty() || rest.front() == '#') continue;
    const absl::string_view original = rest;
    if (absl::StartsWith(rest, "--")) {
      rest.remove_prefix(2);
    } else if (absl::StartsWith(rest, "-")) {
      rest.remove_prefix(1);
    }
    const size_t end = rest.find_first_of("= \t");
    ConfigSetting setting;
    setting.line = line_number;
    setting.name = std::string(rest.substr(0, end));
    if (!IsFlagName(setting.name)) {
      return LineError(file, line_number,
                       absl::StrCat("expected --flag=value or flag = value, "
                                    "got '",
                                    Printable(original), "'"));
    }
    rest =
        end == absl::string_view::npos ? absl::string_view() : rest.substr(end);
    rest = absl::StripLeadingAsciiWhitespace(rest);
    bool equals = false;
    if (!rest.empty() && rest.front() == '=') {
      equals = true;
      rest = absl::StripLeadingAsciiWhitespace(rest.substr(1));
    }
    if (!rest.empty() && (rest.front() == '"' || rest.front() == '\'')) {
      // Quoted: the value is what the quotes hold ('#' included); after
      // them only a comment may follow.
      const size_t close = rest.find(rest.front(), 1);
      const absl::string_view after =
          close == absl::string_view::npos
              ? absl::string_view()
              : absl::StripLeadingAsciiWhitespace(rest.substr(close + 1));
      if (close == absl::string_view::npos ||
          (!after.empty() && after.front() != '#')) {
        return LineError(
            file, line_number,
            absl::StrCat("--", setting.name, ": a quoted value must end with ",
                         "its quote (then only a # comment), got ",
                         Printable(rest)));
      }
      rest = rest.substr(1, close - 1);
    } else {
      // A '#' that begins the value or follows a space or tab begins a
      // comment ("value  # why"); "a#b" is a value.
      for (size_t i = 0; i < rest.size(); ++i) {
        if (rest[i] == '#' &&
            (i == 0 || rest[i - 1] == ' ' || rest[i - 1] == '\t')) {
          rest = absl::StripTrailingAsciiWhitespace(rest.substr(0, i));
          break;
        }
      }
    }
    // "--name value", "--name=" (empty) or a lone "--name".
    setting.has_value = equals || !rest.empty();
    setting.value = std::string(rest);
    // One setting per flag in a file: a second one is a mistake to say,
    // not a value to keep silently (later --config files and the command
    // line still win over earlier ones).
    const auto [first, inserted] =
        first_line.emplace(setting.name, line_number);
    if (!inserted) {
      return LineError(
          file, line_number,
          absl::StrCat("--", setting.name, " is set again (first on line ",
                       first->second, "); set it once"));
    }
    settings.push_back(std::move(setting));
  }
  return settings;
}

absl::Status ApplyConfigFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<std::vector<ConfigSetting>> settings =
      ParseConfigText(*text, path);
  if (!settings.ok()) return settings.status();
  for (const ConfigSetting& setting : *settings) {
    if (setting.name == "config") {
      return LineError(path, setting.line,
                       "--config cannot be used inside a config file");
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(setting.name);
    std::string value = setting.value;
    if (!setting.has_value) {
      if (flag != nullptr && flag->IsOfType<bool>()) {
        value = "true";
      } else if (flag == nullptr && absl::StartsWith(setting.name, "no")) {
        absl::CommandLineFlag* negated =
            absl::FindCommandLineFlag(setting.name.substr(2));
        if (negated != nullptr && negated->IsOfType<bool>()) {
          flag = negated;
          value = "false";
        }
      } else if (flag != nullptr) {
        return LineError(path, setting.line,
                         absl::StrCat("--", setting.name, " needs a value"));
      }
    }
    if (flag == nullptr || flag->IsRetired() || IsAbseilFlag(*flag)) {
      return LineError(
          path, setting.line,
          absl::StrCat("unknown flag '", setting.name, "' (try --help)"));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return LineError(path, setting.line,
                       absl::StrCat("--", flag->Name(), "=", Printable(value),
                                    ": ", Printable(error, 200)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ConfigFilesFromArgs(int argc,
                                                             char** argv) {
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::StartsWith(arg, "-")) continue;
    arg.remove_prefix(absl::StartsWith(arg, "--") ? 2 : 1);
    std::string file;
    if (arg == "config") {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError("--config needs a file name");
      }
      file = argv[++i];
    } else if (absl::StartsWith(arg, "config=")) {
      file = std::string(arg.substr(7));
    } else {
      continue;
    }
    if (file.empty()) {
      return absl::InvalidArgumentError("--config needs a file name");
    }
    files.push_back(std::move(file));
  }
  return files;
}

std::vector<char*> ParseProgramCommandLine(const ProgramInfo& info, int argc,
                                           char** argv) {
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags =
      [file = info.main_file](absl::string_view flag_file) {
        return absl::StrContains(flag_file, file) ||
               absl::StrContains(flag_file, kThisFile);
      };
  usage_config.contains_helpshort_flags = usage_config.contains_help_flags;
  usage_config.version_string = [name = info.name, version = info.version] {
    return absl::StrCat(name, " ", version, "\n");
  };
  absl::SetFlagsUsageConfig(usage_config);
  absl::SetProgramUsageMessage(info.usage);

  // Config files first, so that the command line parsed after them wins.
  absl::StatusOr<std::vector<std::string>> files =
      ConfigFilesFromArgs(argc, argv);
  if (!files.ok())
    std::exit(FailProgram(info.name, 2, files.status().message()));
  for (const std::string& file : *files) {
    absl::Status status = ApplyConfigFile(file);
    if (!status.ok()) std::exit(FailProgram(info.name, 2, status.message()));
  }
  return absl::ParseCommandLine(argc, argv);
}

void StartProgram(const ProgramInfo& info, int argc, char** argv) {
  const std::vector<char*> positional =
      ParseProgramCommandLine(info, argc, argv);
  if (positional.size() > 1) {
    std::exit(FailProgram(info.name, 2,
                          absl::StrCat("unexpected argument '", positional[1],
                                       "' (try --help)")));
  }
  const absl::CommandLineFlag* log_level =
      absl::FindCommandLineFlag("log_level");
  if (log_level == nullptr) return;
  const absl::Status status = ApplyLogLevelFlag(log_level->CurrentValue());
  if (!status.ok()) std::exit(FailProgram(info.name, 2, status.message()));
}

int FailProgram(absl::string_view program, int code,
                absl::string_view message) {
  std::fprintf(stderr, "%s: %s\n", std::string(program).c_str(),
               std::string(message).c_str());
  return code;
}

absl::Status ApplyLogLevelFlag(absl::string_view value) {
  LogSeverity severity;
  absl::Status status = ParseLogSeverity(value, &severity);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--log_level: ", status.message()));
  }
  SetMinLogSeverity(severity);
  return absl::OkStatus();
}

}  // namespace starling
