#include "server/shard/tensor_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace starling {
namespace shard {
namespace {

// How a tensor is named in errors: 'name', or #index when it has none.
std::string TensorLabel(const TensorSpec& spec, size_t index) {
  if (spec.name.empty()) return absl::StrCat("#", index);
  return absl::StrCat("'", spec.name, "'");
}

std::string ShapeAndType(const TensorSpec& spec) {
  return absl::StrCat(ShapeToString(spec.shape), " ",
                      collective::DataTypeName(spec.dtype));
}

}  // namespace

std::string ShapeToString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<TensorTable> TensorTable::Create(std::vector<TensorSpec> specs) {
  TensorTable table;
  table.tensors_.reserve(specs.size());
  uint64_t offset = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    TensorSpec& spec = specs[i];
    const std::string label = TensorLabel(spec, i);
    if (spec.name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor #", i, " has an empty name"));
    }
    if (table.index_.count(spec.name) > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", label, " declared twice (#",
                       table.index_.find(spec.name)->second, " and #", i, ")"));
    }
    if (spec.dtype != collective::DataType::kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", label, ": dtype ", collective::DataTypeName(spec.dtype),
          " not supported; parameters are float32"));
    }
    // The running product stays <= kMaxTotalElements, so multiplying by a
    // dimension that passed the same bound cannot wrap a uint64.
    uint64_t count = 1;
    for (size_t d = 0; d < spec.shape.size(); ++d) {
      const int64_t dim = spec.shape[d];
      if (dim < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", label, ": dimension ", d, " of shape ",
                         ShapeToString(spec.shape), " is ", dim,
                         "; dimensions must be >= 1"));
      }
      if (static_cast<uint64_t>(dim) > kMaxTotalElements ||
          count > kMaxTotalElements / static_cast<uint64_t>(dim)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", label, ": shape ", ShapeToString(spec.shape),
            " overflows (more than ", kMaxTotalElements, " elements)"));
      }
      count *= static_cast<uint64_t>(dim);
    }
    if (count > kMaxTotalElements - offset) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", label, ": shape ", ShapeToString(spec.shape),
                       " at element offset ", offset,
                       " overflows the flat parameter vector (more than ",
                       kMaxTotalElements, " elements)"));
    }
    table.index_.emplace(spec.name, i);
    TensorEntry entry;
    entry.spec = std::move(spec);
    entry.offset = static_cast<size_t>(offset);
    entry.count = static_cast<size_t>(count);
    table.tensors_.push_back(std::move(entry));
    offset += count;
  }
  table.total_elements_ = static_cast<size_t>(offset);
  return table;
}

const TensorEntry* TensorTable::Find(absl::string_view name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) return nullptr;
  return &tensors_[it->second];
}

absl::StatusOr<absl::Span<float>> TensorTable::TensorIn(
    absl::Span<float> flat, absl::string_view name) const {
  if (flat.size() != total_elements_) {
    return absl::InvalidArgumentError(
        absl::StrCat("flat parameter vector holds ", flat.size(),
                     " elements, table has ", total_elements_));
  }
  const TensorEntry* entry = Find(name);
  if (entry == nullptr) {
    return absl::NotFoundError(absl::StrCat("no tensor '", name, "'"));
  }
  return flat.subspan(entry->offset, entry->count);
}

absl::Status TensorTable::Compatible(const TensorTable& other,
                                     absl::string_view other_origin) const {
  const size_t common = std::min(tensors_.size(), other.tensors_.size());
  for (size_t i = 0; i < common; ++i) {
    const TensorSpec& mine = tensors_[i].spec;
    const TensorSpec& theirs = other.tensors_[i].spec;
    if (mine.name != theirs.name) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor #", i, ": '", mine.name, "' here, '",
                       theirs.name, "' on ", other_origin));
    }
    if (mine.shape != theirs.shape || mine.dtype != theirs.dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", mine.name, "': shape ", ShapeAndType(mine),
                       " here, ", ShapeAndType(theirs), " on ", other_origin));
    }
  }
  if (tensors_.size() > common) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", tensors_[common].spec.name, "' (#", common,
        "): declared here, missing on ", other_origin, " (", tensors_.size(),
        " tensors here, ", other.tensors_.size(), " on ", other_origin, ")"));
  }
  if (other.tensors_.size() > common) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", other.tensors_[common].spec.name, "' (#", common,
        "): declared on ", other_origin, ", missing here (", tensors_.size(),
        " tensors here, ", other.tensors_.size(), " on ", other_origin, ")"));
  }
  return absl::OkStatus();
}

}  // namespace shard
}  // namespace starling
