#include "server/base/optimizer_names.h"

namespace starling {
namespace {

// sgd keeps nothing; momentum a velocity; adam first and second moments;
// "none" is plain all-reduce (sum only, no update); easgd is the centre
// update of the EASGD modes (the pushed elastic differences are added to
// the shard, server/shard/optimizer/easgd.h).
constexpr OptimizerInfo kOptimizers[] = {
    {"none", 0, /*updates=*/false, /*implemented=*/true},
    {"sgd", 0, /*updates=*/true, /*implemented=*/true},
    {"momentum", 1, /*updates=*/true, /*implemented=*/true},
    {"adam", 2, /*updates=*/true, /*implemented=*/true},
    {"easgd", 0, /*updates=*/true, /*implemented=*/true},
};

bool Passes(const OptimizerInfo& info, OptimizerFilter filter) {
  switch (filter) {
    case OptimizerFilter::kAll:
      return true;
    case OptimizerFilter::kImplemented:
      return info.implemented;
    case OptimizerFilter::kUpdating:
      return info.implemented && info.updates;
  }
  return false;
}

}  // namespace

absl::Span<const OptimizerInfo> KnownOptimizers() { return kOptimizers; }

const OptimizerInfo* FindOptimizer(absl::string_view name) {
  for (const OptimizerInfo& info : kOptimizers) {
    if (name == info.name) return &info;
  }
  return nullptr;
}

std::vector<std::string> OptimizerNames(OptimizerFilter filter) {
  std::vector<std::string> names;
  for (const OptimizerInfo& info : kOptimizers) {
    if (Passes(info, filter)) names.push_back(info.name);
  }
  return names;
}

}  // namespace starling
