// Tensor tables (the model's tensors, repeated TensorSpec in declaration
// order) as both ends of the control plane see them: how a declaration is
// written in messages ("[4, 5] float32"), its element count, and the
// comparison of two tables that names the first difference. A node daemon
// compares its local workers' lists; the coordinator compares the ranks'
// tables at BeginRun. Depends only on the protos and server/base's DataType.
// Stateless; thread-safe.
#ifndef STARLING_SERVER_BASE_TENSOR_TABLE_H_
#define STARLING_SERVER_BASE_TENSOR_TABLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/common.pb.h"

namespace starling {
namespace proto {

// DataTypeName (server/base/data_type.h) of the type the wire value names:
// "float32", "bfloat16", ...; "unspecified" for DATA_TYPE_UNSPECIFIED and
// values this build does not know.
absl::string_view DataTypeName(DataType type);

// "[4, 5] float32"; a scalar is "[] float32"; "[4, 5] float16 bucket 2"
// when it is in a bucket other than 0.
std::string DescribeSpec(const TensorSpec& spec);

// Product of the dimensions (1 for a scalar). REQUIRES: CheckTensorSpec ok.
uint64_t ElementsOf(const TensorSpec& spec);

// Sum of ElementsOf over `table`. REQUIRES: CheckTensorSpecs ok.
uint64_t TotalElements(const std::vector<TensorSpec>& table);

// Same name, dtype, shape and bucket.
bool SameSpec(const TensorSpec& a, const TensorSpec& b);

// Bytes of one element of `type` (float32 4, float16 2, ...); 0 for an
// unspecified type.
uint64_t ElementBytes(DataType type);

// Sets each tensor's bucket: walking the table from its last tensor to its
// first, a bucket takes tensors while they fit in `bucket_bytes`; a tensor
// that would overflow a non-empty bucket begins the next one (a tensor is
// never split, so a bucket holding one big tensor may exceed the size, as
// PyTorch DDP's bucket cap does); bucket_bytes 0 puts every tensor in
// bucket 0. Bucket 0 holds the last declared tensors
// (backward produces their gradients first). Returns the bucket count.
int AssignBuckets(uint64_t bucket_bytes, std::vector<TensorSpec>* table);

// InvalidArgument naming the tensor when its name is empty, a dimension is
// negative, the dtype is unspecified, or the element count overflows.
absl::Status CheckTensorSpec(const TensorSpec& spec);
// CheckTensorSpec for each, the total must not overflow either, and no name
// may repeat.
absl::Status CheckTensorSpecs(const std::vector<TensorSpec>& table);

// OK when `a` (declared by `a_who`, e.g. "rank 0") equals `b` (by `b_who`):
// same tensors in the same order. Otherwise InvalidArgument naming the
// first difference, both declarations and both declarers:
//   tensor 'w' declared as [1000] float32 by rank 0 but as [999] float32
//   by rank 1
absl::Status CompareTensorTables(const std::vector<TensorSpec>& a,
                                 absl::string_view a_who,
                                 const std::vector<TensorSpec>& b,
                                 absl::string_view b_who);

}  // namespace proto
}  // namespace starling

#endif  // STARLING_SERVER_BASE_TENSOR_TABLE_H_
