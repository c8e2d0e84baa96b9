// What every Starling binary's main() does first: --help that lists only the
// binary's own flags (not Abseil's or gRPC's), --version, the usage text,
// flag parsing, one-line errors, and --log_level. Flags themselves stay in
// each main.cc (STYLE.md §4). Call from main() only; not thread-safe.
#ifndef STARLING_SERVER_BASE_COMMAND_LINE_H_
#define STARLING_SERVER_BASE_COMMAND_LINE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace starling {

struct ProgramInfo {
  std::string name;  // "starling-coordinator": error prefix, --version
  std::string
      main_file;  // "server/coordinator/main.cc": whose flags --help shows
  std::string version;  // printed by --version after the name
  std::string usage;    // the usage message --help prints first
};

// Configures --help, --helpshort and --version from `info`, sets the usage
// message and parses the command line. Returns the positional arguments,
// argv[0] first.
std::vector<char*> ParseProgramCommandLine(const ProgramInfo& info, int argc,
                                           char** argv);

// Prints "<program>: <message>" on stderr; returns `code` (the exit status).
int FailProgram(absl::string_view program, int code, absl::string_view message);

// Parses a --log_level value and makes it the minimum severity logged.
// InvalidArgument ("--log_level: unknown log level ...") otherwise.
absl::Status ApplyLogLevelFlag(absl::string_view value);

}  // namespace starling

#endif  // STARLING_SERVER_BASE_COMMAND_LINE_H_
