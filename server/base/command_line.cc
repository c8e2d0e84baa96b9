#include "server/base/command_line.h"

#include <cstdio>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/base/logging.h"

namespace starling {

std::vector<char*> ParseProgramCommandLine(const ProgramInfo& info, int argc,
                                           char** argv) {
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags =
      [file = info.main_file](absl::string_view flag_file) {
        return absl::StrContains(flag_file, file);
      };
  usage_config.contains_helpshort_flags = usage_config.contains_help_flags;
  usage_config.version_string = [name = info.name, version = info.version] {
    return absl::StrCat(name, " ", version, "\n");
  };
  absl::SetFlagsUsageConfig(usage_config);
  absl::SetProgramUsageMessage(info.usage);
  return absl::ParseCommandLine(argc, argv);
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
