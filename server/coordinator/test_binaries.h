// Test helpers for tests that run this package's binaries: where Bazel put
// them (runfiles), running one to completion with a time bound, and finding
// a free loopback port. Testonly; thread-compatible.
#ifndef STARLING_SERVER_COORDINATOR_TEST_BINARIES_H_
#define STARLING_SERVER_COORDINATOR_TEST_BINARIES_H_

#include <string>
#include <vector>

#include "server/base/scoped_fd.h"

namespace starling {
namespace coordinator {

// The path of `target` (e.g. "server/coordinator/starlingctl") in the
// test's runfiles.
std::string RunfilePath(const std::string& target);

struct RunResult {
  // The exit status; 124 when the time bound (coreutils `timeout`) hit.
  int exit_code = -1;
  // stdout and stderr together.
  std::string output;
};

// Runs `argv` (argv[0] a path) under `timeout <seconds>`, waits for it.
RunResult RunBinary(const std::vector<std::string>& argv, int timeout_seconds);

// A TCP port on 127.0.0.1 that was free a moment ago.
int PickFreePort();

// A socket listening on 127.0.0.1 at a free port; closes on destruction.
class OccupiedPort {
 public:
  OccupiedPort();
  OccupiedPort(const OccupiedPort&) = delete;
  OccupiedPort& operator=(const OccupiedPort&) = delete;
  int port() const { return port_; }

 private:
  ScopedFd fd_;
  int port_ = 0;
};

// Lines in `text` (a final line without '\n' counts).
int CountLines(const std::string& text);

}  // namespace coordinator
}  // namespace starling

#endif  // STARLING_SERVER_COORDINATOR_TEST_BINARIES_H_
