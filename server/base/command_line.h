// What every Starling binary's main() does first: --help that lists only the
// binary's own flags (not Abseil's or gRPC's), --version, the usage text,
// --config files, flag parsing, one-line errors, and --log_level. Flags
// themselves stay in each main.cc (STYLE.md §4). Call from main() only; not
// thread-safe.
#ifndef STARLING_SERVER_BASE_COMMAND_LINE_H_
#define STARLING_SERVER_BASE_COMMAND_LINE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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
//
// Every binary also takes --config=FILE (repeatable): the flags in FILE (see
// ParseConfigText) are set first, in the order the files are named, then the
// command line is parsed, so that a flag given on the command line wins
// whatever its position. A missing file, an unknown flag or a bad value
// prints "<program>: FILE:LINE: ..." on stderr and exits with status 2.
std::vector<char*> ParseProgramCommandLine(const ProgramInfo& info, int argc,
                                           char** argv);

// The whole prologue of a program that takes no positional argument:
// ParseProgramCommandLine, then "<program>: unexpected argument 'x' (try
// --help)" and exit status 2 for a positional argument, then --log_level
// applied (ApplyLogLevelFlag) if the program defines that flag, exit status
// 2 for a bad value.
void StartProgram(const ProgramInfo& info, int argc, char** argv);

// One setting of a config file: flag `name` (without dashes) set to `value`.
struct ConfigSetting {
  std::string name;
  std::string value;
  bool has_value = true;  // false for a lone `--name` (a boolean's true)
  int line = 0;           // 1-based line number in the file
};

// Parses the text of a config file; `file` only names it in errors. One
// setting per line, in either form:
//   --name=value        (or -name=value, or --name value)
//   name = value
// A boolean flag may be given alone (`--insecure`: true) or negated
// (`--noinsecure`: false). A value may be quoted ("..." or '...'), which
// allows an empty, space-padded or '#'-holding value. Blank lines and lines
// whose first non-blank character is '#' are ignored, and so is the rest of
// a line from a '#' that begins the value or follows a space or tab
// (`job_id = demo   # our job` sets "demo"; `a#b` is a value).
// InvalidArgument ("FILE:LINE: ...", the line's text escaped and cut) for a
// line that is no setting, a quote left open, or a flag set a second time
// in the same file (naming the first line).
absl::StatusOr<std::vector<ConfigSetting>> ParseConfigText(
    absl::string_view text, absl::string_view file);

// The largest config file read (a file of flags is a few KiB; this bounds
// what a wrong --config, say /dev/zero, can make a program read).
inline constexpr size_t kMaxConfigBytes = size_t{1} << 20;

// Reads `path` and sets each of its flags (absl::FindCommandLineFlag).
// InvalidArgument for a file of more than kMaxConfigBytes.
// NotFound/PermissionDenied/... (errno's) if the file cannot be read;
// InvalidArgument "FILE:LINE: ..." for an unknown flag (or one of Abseil's
// own, or a nested --config) or a value the flag does not accept. Flags set
// before the failing line stay set.
absl::Status ApplyConfigFile(const std::string& path);

// The FILEs of every --config=FILE / --config FILE (one or two dashes) in
// argv[1..argc), in order, up to a "--" argument. InvalidArgument if
// --config has no (or an empty) value.
absl::StatusOr<std::vector<std::string>> ConfigFilesFromArgs(int argc,
                                                             char** argv);

// Prints "<program>: <message>" on stderr; returns `code` (the exit status).
int FailProgram(absl::string_view program, int code, absl::string_view message);

// Parses a --log_level value and makes it the minimum severity logged.
// InvalidArgument ("--log_level: unknown log level ...") otherwise.
absl::Status ApplyLogLevelFlag(absl::string_view value);

}  // namespace starling

#endif  // STARLING_SERVER_BASE_COMMAND_LINE_H_
