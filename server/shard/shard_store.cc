#include "server/shard/shard_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/status_macros.h"
#include "server/shard/finite_check.h"

namespace starling {
namespace shard {
namespace {

// SplitMix64's output function: a bijective 64-bit mix with good avalanche,
// so consecutive indices give unrelated values.
uint64_t Mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

absl::StatusOr<PageBuffer> AllocateFloats(size_t elements,
                                          absl::string_view what, bool shared) {
  absl::StatusOr<PageBuffer> buffer =
      shared ? PageBuffer::AllocateShared(elements * sizeof(float),
                                          "starling-parameters")
             : PageBuffer::Allocate(elements * sizeof(float));
  if (!buffer.ok()) {
    return Annotate(buffer.status(),
                    absl::StrCat("while allocating the ", what, " buffer of ",
                                 elements, " float32 elements"));
  }
  return buffer;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShardStore>> ShardStore::Create(
    const ShardStoreOptions& options) {
  if (options.ranks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard store over ", options.ranks, " ranks; need >= 1"));
  }
  if (options.rank < 0 || options.rank >= options.ranks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", options.rank, " outside [0, ", options.ranks, ")"));
  }
  if (options.total_elements > SIZE_MAX / sizeof(float)) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter vector of ", options.total_elements,
                     " float32 elements overflows its size in bytes"));
  }
  STARLING_ASSIGN_OR_RETURN(PageBuffer params,
                            AllocateFloats(options.total_elements, "parameter",
                                           /*shared=*/true));
  STARLING_ASSIGN_OR_RETURN(PageBuffer grads,
                            AllocateFloats(options.total_elements, "gradient",
                                           /*shared=*/false));
  return std::unique_ptr<ShardStore>(
      new ShardStore(options, std::move(params), std::move(grads)));
}

ShardStore::ShardStore(const ShardStoreOptions& options, PageBuffer params,
                       PageBuffer grads)
    : layout_(options.total_elements, options.ranks),
      rank_(options.rank),
      params_(std::move(params)),
      grads_(std::move(grads)) {}

uint64_t ShardStore::ParameterFileBytes() const {
  return SharedParametersFileBytes(ParameterBytes());
}

void ShardStore::MarkVersion(int64_t version) {
  header()->writing.store(-1, std::memory_order_relaxed);
  // release: the parameters' writes happen before a reader sees `version`.
  header()->version.store(version, std::memory_order_release);
}

void ShardStore::MarkWriting(int64_t version) {
  header()->version.store(-1, std::memory_order_relaxed);
  header()->writing.store(version, std::memory_order_release);
}

int64_t ShardStore::MarkedVersion() const {
  return header()->version.load(std::memory_order_acquire);
}

absl::Status ShardStore::InitializeFromSeed(uint64_t seed, float scale) {
  if (!std::isfinite(scale) || scale < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "initialization scale ", scale, " must be finite and >= 0"));
  }
  absl::Span<float> params = parameters();
  const uint64_t key = Mix64(seed);
  for (size_t i = 0; i < params.size(); ++i) {
    // Top 24 bits -> a float in [0, 1) exactly; then [-scale, scale).
    const uint64_t bits = Mix64(key + 0x9e3779b97f4a7c15ULL * (i + 1));
    const float unit = static_cast<float>(bits >> 40) * 0x1.0p-24f;
    params[i] = scale * (2.0f * unit - 1.0f);
  }
  return absl::OkStatus();
}

absl::Status ShardStore::InitializeFromValues(absl::Span<const float> values) {
  if (values.size() != total_elements()) {
    return absl::InvalidArgumentError(
        absl::StrCat("initial parameters hold ", values.size(),
                     " elements; the model has ", total_elements()));
  }
  STARLING_RETURN_IF_ERROR(CheckFinite(values, "initial parameter"));
  std::copy(values.begin(), values.end(), parameters().begin());
  return absl::OkStatus();
}

absl::Status ShardStore::LoadShard(absl::Span<const float> values) {
  if (values.size() != shard_elements()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard of rank ", rank_, " holds ", shard_elements(),
                     " elements, got ", values.size()));
  }
  STARLING_RETURN_IF_ERROR(CheckFinite(values, "shard parameter"));
  std::copy(values.begin(), values.end(), shard_parameters().begin());
  return absl::OkStatus();
}

void ShardStore::ZeroGradients() {
  absl::Span<float> grads = gradients();
  std::fill(grads.begin(), grads.end(), 0.0f);
}

}  // namespace shard
}  // namespace starling
