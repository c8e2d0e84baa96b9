#include "server/node/run/declared_tensors.h"

#include <unistd.h>

#include <cstdio>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/base/proto_data_type.h"
#include "server/base/tensor_table.h"

namespace starling {
namespace node {
TensorLayout TensorLayout::FromSpecs(
    const std::vector<proto::TensorSpec>& specs) {
  TensorLayout layout;
  for (const proto::TensorSpec& spec : specs) {
    Entry entry;
    entry.spec = spec;
    entry.offset = layout.total_elements;
    entry.elements = proto::ElementsOf(spec);
    entry.type = proto::DataTypeFromProto(spec.dtype()).value_or(entry.type);
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

namespace {

// The kernel's estimate of memory available for a new allocation without
// swapping (/proc/meminfo MemAvailable); all of physical memory where that
// cannot be read.
uint64_t MemAvailable() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f != nullptr) {
    char line[256];
    unsigned long long kib = 0;  // NOLINT(runtime/int)
    while (std::fgets(line, sizeof(line), f) != nullptr) {
      if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
        std::fclose(f);
        return static_cast<uint64_t>(kib) * 1024;
      }
    }
    std::fclose(f);
  }
  return static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) *
         static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

std::string GiB(double bytes) {
  return absl::StrFormat("%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
}

}  // namespace

DeclaredTensors::DeclaredTensors(int rank, std::function<uint64_t()> available)
    : rank_(rank),
      available_(available != nullptr ? std::move(available) : MemAvailable) {}

absl::Status DeclaredTensors::Declare(int worker,
                                      const proto::TensorSpec& spec) {
  if (spec.name().empty()) {
    return absl::InvalidArgumentError("tensor name is empty");
  }
  for (int64_t d : spec.shape()) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", spec.name(), "': negative dimension in ",
                       proto::DescribeSpec(spec)));
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
      if (s.name() == spec.name() && !proto::SameSpec(s, spec)) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", spec.name(), "' declared as ",
                         proto::DescribeSpec(spec), " by worker ", worker,
                         " of rank ", rank_, " but as ", proto::DescribeSpec(s),
                         " by worker ", other, " of rank ", rank_));
      }
    }
  }
  // Each tensor's elements are bounded (worker_request_check.h): the sum
  // of a worker's fits a double exactly enough.
  double elements = static_cast<double>(proto::ElementsOf(spec));
  for (const proto::TensorSpec& s : mine) {
    elements += static_cast<double>(proto::ElementsOf(s));
  }
  const double need = elements * static_cast<double>(kBytesPerParameter);
  const uint64_t available = available_();
  if (need > static_cast<double>(available)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "tensor '", spec.name(), "' ", proto::DescribeSpec(spec),
        " makes worker ", worker, "'s model ",
        absl::StrFormat("%.0f", elements), " parameters: a run needs about ",
        GiB(need), " of daemon rank ", rank_, "'s memory for them (",
        kBytesPerParameter, " bytes each), more than the ",
        GiB(static_cast<double>(available)), " available"));
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
    absl::Status same = proto::CompareTensorTables(
        first, absl::StrCat("worker ", workers[0], " of rank ", rank_), specs,
        absl::StrCat("worker ", workers[i], " of rank ", rank_));
    if (!same.ok()) return same;
  }
  return first;
}

void DeclaredTensors::Forget(int worker) {
  absl::MutexLock lock(&mu_);
  by_worker_.erase(worker);
}

}  // namespace node
}  // namespace starling
