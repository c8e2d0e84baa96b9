#include "worker/trainer/pool_tensors.h"

#include <algorithm>
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

client::Tensor AsTensor(const std::string& name, const PoolTensor& t) {
  if (!t.b16.empty()) return client::Tensor(name, t.b16);
  return client::Tensor(name, t.f32);
}

void ToPool(client::DataType dtype, absl::Span<const float> from,
            PoolTensor& to) {
  switch (dtype) {
    case client::DataType::kFloat16:
      client::ToFloat16(from, to.b16);
      break;
    case client::DataType::kBFloat16:
      client::ToBFloat16(from, to.b16);
      break;
    default:
      std::copy(from.begin(), from.end(), to.f32.begin());
  }
}

void FromPool(client::DataType dtype, const PoolTensor& from,
              absl::Span<float> to) {
  switch (dtype) {
    case client::DataType::kFloat16:
      client::FromFloat16(from.b16, to);
      break;
    case client::DataType::kBFloat16:
      client::FromBFloat16(from.b16, to);
      break;
    default:
      std::copy(from.f32.begin(), from.f32.end(), to.begin());
  }
}

absl::StatusOr<std::vector<PoolTensor>> AllocateSet(
    client::Client& client, client::DataType dtype,
    const std::vector<train::TensorInfo>& tensors, size_t parameters) {
  std::vector<PoolTensor> set(tensors.size());
  if (dtype == client::DataType::kFloat32) {
    absl::StatusOr<absl::Span<float>> flat = client.Allocate(parameters);
    if (!flat.ok()) return flat.status();
    for (size_t i = 0; i < tensors.size(); ++i) {
      set[i].f32 = flat->subspan(tensors[i].offset, tensors[i].elements);
    }
    return set;
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    absl::StatusOr<absl::Span<uint16_t>> b =
        client.AllocateTensor16(tensors[i].name);
    if (!b.ok()) return b.status();
    set[i].b16 = *b;
  }
  return set;
}

}  // namespace trainer
}  // namespace starling
