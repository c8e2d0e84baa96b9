// ShardStore: this rank's memory for the model. It holds
//   - the full flat float32 parameter vector: the all-gather target, read by
//     local workers after each step;
//   - inside it, this rank's shard, the range
//     ShardLayout(total, ranks).Begin(rank) .. End(rank) that this rank's
//     optimizer updates;
//   - a full-length gradient buffer: local workers' gradients are summed into
//     it, and the reduce-scatter leaves the global sum of this rank's shard in
//     the same range of it.
// Both buffers are page-aligned PageBuffers, so the transport can register
// them. The parameters live in a sealed memfd behind a header page holding
// their version (server/base/shared_parameters.h), so that local workers can
// map them read-only (sync modes: client ParametersView). Thread-compatible:
// the node daemon's step phases (reduce, reduce-scatter, update, all-gather,
// pull) order all access; the store itself takes no locks.
#ifndef STARLING_SERVER_SHARD_SHARD_STORE_H_
#define STARLING_SERVER_SHARD_SHARD_STORE_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/base/shared_parameters.h"
#include "server/collective/shard_layout.h"
#include "server/shard/page_buffer.h"

namespace starling {
namespace shard {

struct ShardStoreOptions {
  // Length of the flat parameter vector in float32 elements
  // (TensorTable::total_elements()). Default 0: an empty model.
  size_t total_elements = 0;
  // Ranks in the group, >= 1. Default 1.
  int ranks = 1;
  // This rank, in [0, ranks). Default 0.
  int rank = 0;
};

class ShardStore {
 public:
  // Allocates zero-filled parameter and gradient buffers. InvalidArgument for
  // ranks < 1, rank outside [0, ranks) or a length whose bytes overflow;
  // ResourceExhausted if the memory cannot be mapped.
  static absl::StatusOr<std::unique_ptr<ShardStore>> Create(
      const ShardStoreOptions& options);

  ShardStore(const ShardStore&) = delete;
  ShardStore& operator=(const ShardStore&) = delete;

  int rank() const { return rank_; }
  int ranks() const { return layout_.parts(); }
  const collective::ShardLayout& layout() const { return layout_; }
  size_t total_elements() const { return layout_.count(); }
  // This rank's shard: [shard_begin(), shard_end()) of the flat vector.
  size_t shard_begin() const { return layout_.Begin(rank_); }
  size_t shard_end() const { return layout_.End(rank_); }
  size_t shard_elements() const { return layout_.Size(rank_); }

  // Bytes of this rank's shard (shard_elements() floats).
  uint64_t ShardBytes() const { return shard_elements() * sizeof(float); }
  // Bytes of the full parameter vector (total_elements() floats).
  uint64_t ParameterBytes() const { return total_elements() * sizeof(float); }

  // The full parameter vector (page-aligned; empty for an empty model).
  absl::Span<float> parameters() { return {params_data(), total_elements()}; }
  absl::Span<const float> parameters() const {
    return {params_data(), total_elements()};
  }
  // This rank's shard inside parameters().
  absl::Span<float> shard_parameters() {
    return parameters().subspan(shard_begin(), shard_elements());
  }
  absl::Span<const float> shard_parameters() const {
    return parameters().subspan(shard_begin(), shard_elements());
  }
  // The full-length gradient accumulation buffer (page-aligned).
  absl::Span<float> gradients() { return {grads_data(), total_elements()}; }
  absl::Span<const float> gradients() const {
    return {grads_data(), total_elements()};
  }
  // This rank's shard inside gradients(): the reduce-scatter result.
  absl::Span<float> shard_gradients() {
    return gradients().subspan(shard_begin(), shard_elements());
  }
  absl::Span<const float> shard_gradients() const {
    return gradients().subspan(shard_begin(), shard_elements());
  }

  // The mappings behind parameters() and gradients(), for registration with
  // a transport (mapped_bytes() is whole pages).
  const PageBuffer& parameter_buffer() const { return params_; }
  const PageBuffer& gradient_buffer() const { return grads_; }

  // The parameters' memfd (owned by the store; dup it to pass it on). Sealed
  // against resizing and, where the kernel can, new writable mappings.
  int parameters_fd() const { return params_.fd(); }
  // Bytes of that memfd: the header page and the parameters' pages.
  uint64_t ParameterFileBytes() const;
  // The version the shared header announces: `version` (the parameters
  // hold it, release order after the writes), or, with MarkWriting, that
  // the parameters are being overwritten with `version`.
  void MarkVersion(int64_t version);
  void MarkWriting(int64_t version);
  // The header's current version (-1 while writing).
  int64_t MarkedVersion() const;

  // Fills every parameter with a value drawn uniformly from [-scale, scale]
  // by hashing (seed, element index). Independent of ranks and rank, so every
  // rank given the same seed holds the same full vector without
  // communicating. InvalidArgument unless scale is finite and >= 0.
  absl::Status InitializeFromSeed(uint64_t seed, float scale);

  // Copies `values` (the full vector) into parameters(). InvalidArgument if
  // values.size() != total_elements() or a value is NaN or infinite.
  absl::Status InitializeFromValues(absl::Span<const float> values);

  // Copies `values` into this rank's shard only (restore from a shard
  // checkpoint; an all-gather then fills the rest). InvalidArgument if
  // values.size() != shard_elements() or a value is NaN or infinite.
  absl::Status LoadShard(absl::Span<const float> values);

  // Sets every gradient to 0 (before the next step's local reduce).
  void ZeroGradients();

 private:
  ShardStore(const ShardStoreOptions& options, PageBuffer params,
             PageBuffer grads);

  float* params_data() const { return static_cast<float*>(params_.data()); }
  float* grads_data() const { return static_cast<float*>(grads_.data()); }
  SharedParametersHeader* header() const {
    return static_cast<SharedParametersHeader*>(params_.header());
  }

  collective::ShardLayout layout_;
  int rank_;
  PageBuffer params_;
  PageBuffer grads_;
};

}  // namespace shard
}  // namespace starling

#endif  // STARLING_SERVER_SHARD_SHARD_STORE_H_
