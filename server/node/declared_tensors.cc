#include "server/node/declared_tensors.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace starling {
namespace node {
namespace {

const char* DtypeName(proto::DataType type) {
  switch (type) {
    case proto::DATA_TYPE_FLOAT32:
      return "float32";
    case proto::DATA_TYPE_FLOAT64:
      return "float64";
    case proto::DATA_TYPE_FLOAT16:
      return "float16";
    case proto::DATA_TYPE_BFLOAT16:
      return "bfloat16";
    case proto::DATA_TYPE_INT32:
      return "int32";
    case proto::DATA_TYPE_INT64:
      return "int64";
    default:
      return "unspecified";
  }
}

bool SameSpec(const proto::TensorSpec& a, const proto::TensorSpec& b) {
  if (a.name() != b.name() || a.dtype() != b.dtype() ||
      a.shape_size() != b.shape_size()) {
    return false;
  }
  for (int i = 0; i < a.shape_size(); ++i) {
    if (a.shape(i) != b.shape(i)) return false;
  }
  return true;
}

// The first difference between two declaration lists, or "" if equal.
std::string FirstDifference(const std::vector<proto::TensorSpec>& a,
                            absl::string_view a_who,
                            const std::vector<proto::TensorSpec>& b,
                            absl::string_view b_who) {
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    if (i >= a.size()) {
      return absl::StrCat("tensor '", b[i].name(), "' declared as ",
                          DescribeSpec(b[i]), " by ", b_who,
                          " but not declared by ", a_who);
    }
    if (i >= b.size()) {
      return absl::StrCat("tensor '", a[i].name(), "' declared as ",
                          DescribeSpec(a[i]), " by ", a_who,
                          " but not declared by ", b_who);
    }
    if (a[i].name() != b[i].name()) {
      return absl::StrCat("declaration ", i, " is tensor '", a[i].name(),
                          "' on ", a_who, " but tensor '", b[i].name(), "' on ",
                          b_who,
                          " (every worker declares the same tensors in the "
                          "same order)");
    }
    if (!SameSpec(a[i], b[i])) {
      return absl::StrCat("tensor '", a[i].name(), "' declared as ",
                          DescribeSpec(a[i]), " by ", a_who, " but as ",
                          DescribeSpec(b[i]), " by ", b_who);
    }
  }
  return "";
}

}  // namespace

std::string DescribeSpec(const proto::TensorSpec& spec) {
  return absl::StrCat("[", absl::StrJoin(spec.shape(), ", "), "] ",
                      DtypeName(spec.dtype()));
}

uint64_t ElementsOf(const proto::TensorSpec& spec) {
  uint64_t elements = 1;
  for (int64_t d : spec.shape()) elements *= static_cast<uint64_t>(d);
  return elements;
}

TensorLayout TensorLayout::FromSpecs(
    const std::vector<proto::TensorSpec>& specs) {
  TensorLayout layout;
  for (const proto::TensorSpec& spec : specs) {
    Entry entry;
    entry.spec = spec;
    entry.offset = layout.total_elements;
    entry.elements = ElementsOf(spec);
    layout.total_elements += entry.elements;
    layout.index[spec.name()] = static_cast<int>(layout.tensors.size());
    layout.tensors.push_back(std::move(entry));
  }
  return layout;
}

absl::StatusOr<const TensorLayout::Entry*> TensorLayout::Find(
    const std::string& name) const {
  auto it = index.find(name);
  if (it == index.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' was not declared"));
  }
  return &tensors[it->second];
}

absl::Status DeclaredTensors::Declare(int worker,
                                      const proto::TensorSpec& spec) {
  if (spec.name().empty()) {
    return absl::InvalidArgumentError("tensor name is empty");
  }
  for (int64_t d : spec.shape()) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", spec.name(), "': negative dimension in ",
                       DescribeSpec(spec)));
    }
  }
  absl::MutexLock lock(&mu_);
  std::vector<proto::TensorSpec>& mine = by_worker_[worker];
  for (const proto::TensorSpec& s : mine) {
    if (s.name() == spec.name()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", spec.name(), "' declared twice by worker ",
                       worker, " of rank ", rank_));
    }
  }
  for (const auto& [other, specs] : by_worker_) {
    if (other == worker) continue;
    for (const proto::TensorSpec& s : specs) {
      if (s.name() == spec.name() && !SameSpec(s, spec)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", spec.name(), "' declared as ", DescribeSpec(spec),
            " by worker ", worker, " of rank ", rank_, " but as ",
            DescribeSpec(s), " by worker ", other, " of rank ", rank_));
      }
    }
  }
  mine.push_back(spec);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<proto::TensorSpec>> DeclaredTensors::LocalTable(
    const std::vector<int>& workers) const {
  absl::MutexLock lock(&mu_);
  std::vector<proto::TensorSpec> first;
  for (size_t i = 0; i < workers.size(); ++i) {
    auto it = by_worker_.find(workers[i]);
    std::vector<proto::TensorSpec> specs;
    if (it != by_worker_.end()) specs = it->second;
    if (i == 0) {
      first = std::move(specs);
      continue;
    }
    const std::string diff = FirstDifference(
        first, absl::StrCat("worker ", workers[0], " of rank ", rank_), specs,
        absl::StrCat("worker ", workers[i], " of rank ", rank_));
    if (!diff.empty()) return absl::InvalidArgumentError(diff);
  }
  return first;
}

void DeclaredTensors::Forget(int worker) {
  absl::MutexLock lock(&mu_);
  by_worker_.erase(worker);
}

absl::Status CompareTables(
    const std::vector<proto::DeclaredTensorTable>& tables) {
  if (tables.empty()) return absl::OkStatus();
  const std::vector<proto::TensorSpec> first(tables[0].tensors().begin(),
                                             tables[0].tensors().end());
  for (size_t r = 1; r < tables.size(); ++r) {
    const std::vector<proto::TensorSpec> other(tables[r].tensors().begin(),
                                               tables[r].tensors().end());
    const std::string diff = FirstDifference(
        first, absl::StrCat("the workers of rank ", tables[0].rank()), other,
        absl::StrCat("the workers of rank ", tables[r].rank()));
    if (!diff.empty()) return absl::InvalidArgumentError(diff);
  }
  return absl::OkStatus();
}

}  // namespace node
}  // namespace starling
