// DeclaredTensors: the tensors this daemon's workers declared, checked for
// agreement between the local workers as they come in and at the end of
// the declarations (the coordinator compares the daemons' tables at
// BeginRun, with the same proto/tensor_table.h). A run's table fixes the
// layout of the flat parameter vector: tensors one after the other in
// declaration order.
// Thread-safe.
#ifndef STARLING_SERVER_NODE_RUN_DECLARED_TENSORS_H_
#define STARLING_SERVER_NODE_RUN_DECLARED_TENSORS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/common.pb.h"
#include "server/base/data_type.h"

namespace starling {
namespace node {

// Where each tensor lies in the flat parameter vector. Value type.
struct TensorLayout {
  struct Entry {
    proto::TensorSpec spec;
    uint64_t offset = 0;  // elements
    uint64_t elements = 0;
    // spec.dtype() as a DataType (float32 for a type this build does not
    // know; CreateRun refuses those).
    DataType type = DataType::kFloat32;
  };
  std::vector<Entry> tensors;
  std::map<std::string, int> index;  // name -> position in `tensors`
  uint64_t total_elements = 0;

  static TensorLayout FromSpecs(const std::vector<proto::TensorSpec>& specs);
  // The entry of `name`; InvalidArgument naming it when unknown.
  absl::StatusOr<const Entry*> Find(const std::string& name) const;
};

class DeclaredTensors {
 public:
  // Bytes of this daemon's memory a run takes per parameter, at the least:
  // the parameters, their gradients and the all-reduce's staging (float32).
  static constexpr uint64_t kBytesPerParameter = 12;

  // `rank` names this daemon in messages; `available` says how many bytes
  // of memory a run may take now (default: the kernel's MemAvailable).
  explicit DeclaredTensors(int rank,
                           std::function<uint64_t()> available = nullptr);

  // Records `spec` for `worker`. InvalidArgument when the worker declared
  // the name already, or another local worker declared it differently
  // (naming the tensor, both declarations and both workers);
  // ResourceExhausted when the worker's tensors would need more than the
  // available memory at kBytesPerParameter each (naming the tensor, the
  // need and what is available): a run that big would abort the daemon.
  absl::Status Declare(int worker, const proto::TensorSpec& spec);

  // Every local worker's list must be the same (names, order, shapes,
  // dtypes). Returns it; InvalidArgument naming the first difference.
  absl::StatusOr<std::vector<proto::TensorSpec>> LocalTable(
      const std::vector<int>& workers) const;

  void Forget(int worker);

 private:
  const int rank_;
  const std::function<uint64_t()> available_;
  mutable absl::Mutex mu_;
  std::map<int, std::vector<proto::TensorSpec>> by_worker_ ABSL_GUARDED_BY(mu_);
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_RUN_DECLARED_TENSORS_H_
