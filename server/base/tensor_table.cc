#include "server/base/tensor_table.h"

#include <algorithm>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/base/data_type.h"
#include "server/base/proto_data_type.h"

namespace starling {
namespace proto {

absl::string_view DataTypeName(DataType type) {
  absl::StatusOr<::starling::DataType> known = DataTypeFromProto(type);
  return known.ok() ? ::starling::DataTypeName(*known) : "unspecified";
}

std::string DescribeSpec(const TensorSpec& spec) {
  return absl::StrCat(
      "[", absl::StrJoin(spec.shape(), ", "), "] ", DataTypeName(spec.dtype()),
      spec.bucket() != 0 ? absl::StrCat(" bucket ", spec.bucket()) : "");
}

uint64_t ElementBytes(DataType type) {
  absl::StatusOr<::starling::DataType> known = DataTypeFromProto(type);
  return known.ok() ? ::starling::DataTypeBytes(*known) : 0;
}

int AssignBuckets(uint64_t bucket_bytes, std::vector<TensorSpec>* table) {
  int bucket = 0;
  uint64_t filled = 0;
  for (auto it = table->rbegin(); it != table->rend(); ++it) {
    const uint64_t bytes = ElementsOf(*it) * ElementBytes(it->dtype());
    if (bucket_bytes != 0 && filled > 0 && filled + bytes > bucket_bytes) {
      ++bucket;
      filled = 0;
    }
    it->set_bucket(bucket);
    filled += bytes;
  }
  return table->empty() ? 0 : bucket + 1;
}

uint64_t ElementsOf(const TensorSpec& spec) {
  uint64_t elements = 1;
  for (int64_t d : spec.shape()) elements *= static_cast<uint64_t>(d);
  return elements;
}

uint64_t TotalElements(const std::vector<TensorSpec>& table) {
  uint64_t total = 0;
  for (const TensorSpec& spec : table) total += ElementsOf(spec);
  return total;
}

bool SameSpec(const TensorSpec& a, const TensorSpec& b) {
  if (a.name() != b.name() || a.dtype() != b.dtype() ||
      a.bucket() != b.bucket() || a.shape_size() != b.shape_size()) {
    return false;
  }
  for (int i = 0; i < a.shape_size(); ++i) {
    if (a.shape(i) != b.shape(i)) return false;
  }
  return true;
}

absl::Status CheckTensorSpec(const TensorSpec& spec) {
  if (spec.name().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a tensor declared as ", DescribeSpec(spec), " has an empty name"));
  }
  if (spec.dtype() == DATA_TYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", spec.name(), "' has no dtype"));
  }
  uint64_t elements = 1;
  for (int64_t d : spec.shape()) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", spec.name(), "': negative dimension in ",
                       DescribeSpec(spec)));
    }
    const uint64_t dim = static_cast<uint64_t>(d);
    if (dim != 0 && elements > std::numeric_limits<uint64_t>::max() / dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", spec.name(), "' declared as ",
                       DescribeSpec(spec), " has more than 2^64 elements"));
    }
    elements *= dim;
  }
  return absl::OkStatus();
}

absl::Status CheckTensorSpecs(const std::vector<TensorSpec>& table) {
  std::set<std::string> names;
  uint64_t total = 0;
  for (const TensorSpec& spec : table) {
    if (absl::Status status = CheckTensorSpec(spec); !status.ok()) {
      return status;
    }
    if (!names.insert(spec.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", spec.name(), "' is declared twice"));
    }
    const uint64_t elements = ElementsOf(spec);
    if (total > std::numeric_limits<uint64_t>::max() - elements) {
      return absl::InvalidArgumentError(
          "the tensors hold more than 2^64 elements together");
    }
    total += elements;
  }
  return absl::OkStatus();
}

absl::Status CompareTensorTables(const std::vector<TensorSpec>& a,
                                 absl::string_view a_who,
                                 const std::vector<TensorSpec>& b,
                                 absl::string_view b_who) {
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    if (i >= a.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", b[i].name(), "' declared as ", DescribeSpec(b[i]), " by ",
          b_who, " but not declared by ", a_who));
    }
    if (i >= b.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", a[i].name(), "' declared as ", DescribeSpec(a[i]), " by ",
          a_who, " but not declared by ", b_who));
    }
    if (a[i].name() != b[i].name()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "declaration ", i, " is tensor '", a[i].name(), "' on ", a_who,
          " but tensor '", b[i].name(), "' on ", b_who,
          " (every worker declares the same tensors in the same order)"));
    }
    if (!SameSpec(a[i], b[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", a[i].name(), "' declared as ", DescribeSpec(a[i]), " by ",
          a_who, " but as ", DescribeSpec(b[i]), " by ", b_who));
    }
  }
  return absl::OkStatus();
}

}  // namespace proto
}  // namespace starling
