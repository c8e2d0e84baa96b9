// TensorTable: the model's tensors laid out back to back, in declaration
// order, in one flat float32 parameter vector. Each tensor gets an element
// offset and count in that vector; the shard layout then cuts the vector into
// N blocks without regard to tensor boundaries.
//
// Every worker declares the same table; the node daemon builds one from the
// first declaration and checks later ones (from local workers and from other
// ranks) against it with Compatible(). Immutable after Create(); thread-safe
// for concurrent const use.
#ifndef STARLING_SERVER_SHARD_TENSOR_TABLE_H_
#define STARLING_SERVER_SHARD_TENSOR_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "server/collective/data_type.h"

namespace starling {
namespace shard {

// One tensor as a worker declares it.
struct TensorSpec {
  // Unique, non-empty, e.g. "fc1.weight".
  std::string name;
  // Dimensions, each >= 1. Empty means a scalar (one element).
  std::vector<int64_t> shape;
  // Only kFloat32 is accepted for parameters in this version.
  collective::DataType dtype = collective::DataType::kFloat32;
};

// A tensor's place in the flat parameter vector, in elements.
struct TensorEntry {
  TensorSpec spec;
  size_t offset = 0;  // first element in the flat vector
  size_t count = 0;   // product of the dimensions
};

// "[784, 128]"; "[]" for a scalar.
std::string ShapeToString(absl::Span<const int64_t> shape);

class TensorTable {
 public:
  // Largest flat vector accepted, in elements: its size in bytes must fit an
  // int64 (frames and shard maps carry byte counts as int64).
  static constexpr uint64_t kMaxTotalElements = INT64_MAX / sizeof(float);

  // Lays `specs` out in order. InvalidArgument, naming the tensor (or its
  // index when the name is empty), for: an empty name, a duplicate name, a
  // dimension < 1, a dtype other than float32, or an element count (of one
  // tensor or of the whole table) above kMaxTotalElements. An empty list is
  // valid (a model with no parameters).
  static absl::StatusOr<TensorTable> Create(std::vector<TensorSpec> specs);

  // An empty table.
  TensorTable() = default;

  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  size_t num_tensors() const { return tensors_.size(); }
  // Length of the flat parameter vector.
  size_t total_elements() const { return total_elements_; }
  uint64_t total_bytes() const { return total_elements_ * sizeof(float); }

  // The tensor called `name`, or nullptr. The pointer lives as long as this
  // table.
  const TensorEntry* Find(absl::string_view name) const;

  // The tensor's elements inside `flat`. NotFound for an unknown name;
  // InvalidArgument if flat.size() != total_elements().
  absl::StatusOr<absl::Span<float>> TensorIn(absl::Span<float> flat,
                                             absl::string_view name) const;

  // OK if `other` declares the same tensors (names, order, shapes, dtypes).
  // Otherwise InvalidArgument naming the first difference, with `other_origin`
  // ("rank 2", "worker 5") saying where `other` came from, e.g.
  //   tensor 'fc1.weight': shape [784, 128] float32 here, [784, 64] float32
  //   on rank 2
  absl::Status Compatible(const TensorTable& other,
                          absl::string_view other_origin) const;

 private:
  std::vector<TensorEntry> tensors_;
  // name -> index into tensors_.
  std::map<std::string, size_t, std::less<>> index_;
  size_t total_elements_ = 0;
};

}  // namespace shard
}  // namespace starling

#endif  // STARLING_SERVER_SHARD_TENSOR_TABLE_H_
