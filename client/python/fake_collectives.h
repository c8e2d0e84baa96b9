// Test-only: the workers of a Starling job simulated in one process, each
// with its own collective table (collective_api.h), so that the torch
// backend's ops can be checked without daemons. The k-th collective started
// by every worker forms round k; when all workers started it, the round
// runs (computed with ATen) and every worker's `done` is called on the
// thread that completed it. Workers whose round-k calls differ (kind,
// bytes, type, operator, root) all fail, naming both calls, as the daemons
// do.
//
// Thread-safe.
#ifndef STARLING_CLIENT_PYTHON_FAKE_COLLECTIVES_H_
#define STARLING_CLIENT_PYTHON_FAKE_COLLECTIVES_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "client/python/collective_api.h"

namespace starling {
namespace torch_backend {

class FakeCollectives {
 public:
  explicit FakeCollectives(int workers);
  ~FakeCollectives();
  FakeCollectives(const FakeCollectives&) = delete;
  FakeCollectives& operator=(const FakeCollectives&) = delete;

  // The table of the worker in `slot`; valid while this object lives.
  const StarlingCollectiveApi* api(int slot);

  // Collectives started by every worker so far (rounds completed).
  int64_t rounds_completed();

 private:
  struct Call {
    int slot = 0;
    int kind = 0;
    std::byte* data = nullptr;
    size_t bytes = 0;
    int dtype = 0;
    int op = 0;
    int root = 0;
    StarlingDone done = nullptr;
    void* arg = nullptr;
  };
  struct Member;

  static int TotalWorkers(void* member);
  static int Slot(void* member);
  static void* Allocate(void* member, size_t bytes, char* error,
                        size_t error_bytes);
  static void Start(void* member, int kind, void* data, size_t bytes, int dtype,
                    int op, int root, StarlingDone done, void* arg);

  void Add(Call call, int64_t round);
  // Runs a complete round; returns the status code and message.
  static int Run(std::vector<Call>& calls, std::string& message);

  const int workers_;
  std::vector<std::unique_ptr<Member>> members_;
  absl::Mutex mu_;
  std::map<int64_t, std::vector<Call>> rounds_ ABSL_GUARDED_BY(mu_);
  int64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace torch_backend
}  // namespace starling

#endif  // STARLING_CLIENT_PYTHON_FAKE_COLLECTIVES_H_
