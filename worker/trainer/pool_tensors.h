// Pool tensors: the trainer's buffers in the client's shared-memory pool
// (float32, or 16-bit for float16/bfloat16 tensors) and the conversions
// between them and the model's float32 host vectors.
//
// Thread-compatible.
#ifndef STARLING_WORKER_TRAINER_POOL_TENSORS_H_
#define STARLING_WORKER_TRAINER_POOL_TENSORS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/client.h"
#include "worker/train/model.h"

namespace starling {
namespace trainer {

// One tensor's buffer in the pool: f32 for a float32 tensor, b16 for a
// 16-bit one (the other is empty).
struct PoolTensor {
  absl::Span<float> f32;
  absl::Span<uint16_t> b16;
};

// The client's view of `t`, named `name`.
client::Tensor AsTensor(const std::string& name, const PoolTensor& t);

// float32 host values into the pool tensor (converted to `dtype`), and
// back. Sizes must match.
void ToPool(client::DataType dtype, absl::Span<const float> from,
            PoolTensor& to);
void FromPool(client::DataType dtype, const PoolTensor& from,
              absl::Span<float> to);

// Pool buffers for every one of `tensors` (declared with `dtype`); float32
// ones are slices of one buffer of `parameters` floats. The client's
// Allocate errors (ResourceExhausted when the pool is full).
absl::StatusOr<std::vector<PoolTensor>> AllocateSet(
    client::Client& client, client::DataType dtype,
    const std::vector<train::TensorInfo>& tensors, size_t parameters);

}  // namespace trainer
}  // namespace starling

#endif  // STARLING_WORKER_TRAINER_POOL_TENSORS_H_
