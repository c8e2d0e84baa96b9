// Model: the reference trainer's networks (an MLP and a LeNet-style CNN) over
// a Backend, with parameters and gradients as ONE flat float32 host vector
// each (the layout the trainer pushes and pulls), and a backward pass that
// reports each layer's gradients as soon as they are in that host vector.
//
// Architectures (input [batch, 1, 28, 28], normalised; output logits [batch,
// 10]; softmax cross-entropy loss, mean over the batch):
//
//   MLP (ModelKind::kMlp), 235,146 parameters:
//     flatten 784 -> fc1 784->256, ReLU -> fc2 256->128, ReLU -> fc3 128->10
//       fc1.weight [256, 784]  200,704    fc1.bias [256]  256
//       fc2.weight [128, 256]   32,768    fc2.bias [128]  128
//       fc3.weight [10, 128]     1,280    fc3.bias [10]    10
//
//   CNN (ModelKind::kCnn), 215,370 parameters (convs 5x5, stride 1, pad 2):
//     conv1 1->16, ReLU, maxpool 2x2  -> [16, 14, 14]
//     conv2 16->32, ReLU, maxpool 2x2 -> [32, 7, 7]
//     flatten 1568 -> fc1 1568->128, ReLU -> fc2 128->10
//       conv1.weight [16, 1, 5, 5]      400    conv1.bias [16]    16
//       conv2.weight [32, 16, 5, 5]  12,800    conv2.bias [32]    32
//       fc1.weight [128, 1568]      200,704    fc1.bias [128]    128
//       fc2.weight [10, 128]          1,280    fc2.bias [10]      10
//
// Linear weights are [out, in] (y = x W^T + b), conv filters [out_c, in_c, k,
// k], as in PyTorch. The flat vector holds the tensors above in this order
// (forward order), each weight followed by its bias, with no padding.
//
// Use: Create once per backend; SetParameters before each step (after a
// pull); Forward(x, batch); Loss(labels) if wanted; Backward(labels, ready).
//
// Thread safety: thread-compatible; confined to the thread driving the
// backend. The callback runs on the calling thread inside Backward.
#ifndef STARLING_WORKER_TRAIN_MODEL_H_
#define STARLING_WORKER_TRAIN_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "worker/train/backend.h"
#include "worker/train/dataset.h"

namespace starling {
namespace train {

enum class ModelKind { kMlp, kCnn };

// "mlp" or "cnn"; InvalidArgument naming the accepted values otherwise.
absl::StatusOr<ModelKind> ParseModelKind(absl::string_view name);
absl::string_view ModelKindName(ModelKind kind);

// One named parameter tensor inside the flat vector.
struct TensorInfo {
  std::string name;            // "fc1.weight"
  std::vector<int64_t> shape;  // {256, 784}
  size_t offset = 0;           // first element in the flat vector
  size_t elements = 0;         // product of shape
};

// Result of Evaluate over samples [begin, end).
struct EvalResult {
  double loss_sum = 0.0;  // sum over samples of the cross-entropy
  int64_t correct = 0;    // samples whose argmax logit is the label
  int64_t count = 0;      // end - begin
};

// Called by Backward with the indices (into tensors()) of the tensors whose
// gradients have just been written to gradients(); last layer first.
using GradientsReadyCallback =
    std::function<void(const std::vector<int>& tensor_indices)>;

class Model {
 public:
  // Builds `kind` on `backend` (borrowed; must outlive the model) with
  // buffers for batches of up to max_batch samples. Parameters start at
  // zero: call SetParameters. InvalidArgument if max_batch < 1; the
  // backend's Allocate errors.
  static absl::StatusOr<std::unique_ptr<Model>> Create(ModelKind kind,
                                                       Backend* backend,
                                                       int max_batch);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  ModelKind kind() const { return kind_; }
  int max_batch() const { return max_batch_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // Total elements of the flat parameter (and gradient) vector.
  size_t parameter_count() const { return parameter_count_; }

  // Fills flat with initial parameters, deterministic from seed: weights of
  // layers followed by ReLU He-normal (std sqrt(2 / fan_in)), the last
  // layer's weight Glorot-normal (std sqrt(2 / (fan_in + fan_out))), biases
  // zero; fan_in of a conv is in_c * k * k. Each tensor draws from its own
  // std::mt19937_64 (seeded from seed and the tensor's index) through
  // Box-Muller on the raw output, so the result is the same on every
  // platform. REQUIRES: flat.size() == parameter_count().
  void InitParameters(uint64_t seed, absl::Span<float> flat) const;

  // Copies flat host parameters into the backend. InvalidArgument if the
  // size is not parameter_count().
  absl::Status SetParameters(absl::Span<const float> flat);
  // Copies the backend's parameters out (the inverse of SetParameters).
  absl::Status GetParameters(absl::Span<float> flat) const;

  // Runs the network on host_x [batch, 1, 28, 28] (normalised). InvalidArgument
  // unless 1 <= batch <= max_batch().
  absl::Status Forward(const float* host_x, int batch);
  // Mean cross-entropy of the last Forward's logits against host labels
  // [batch]. FailedPrecondition before any Forward.
  absl::StatusOr<float> Loss(const uint8_t* host_labels);
  // Copies the last Forward's logits [batch, 10] to host memory.
  absl::Status CopyLogits(float* host_logits) const;

  // Gradients of the mean cross-entropy of the last Forward against host
  // labels [batch], layer by layer from the last. After each layer with
  // parameters, its weight and bias gradients are copied into gradients()
  // and `ready` (may be empty) is called with their tensor indices; the
  // callback may read gradients() for those tensors until Backward returns
  // (later layers do not touch them). FailedPrecondition before any Forward.
  absl::Status Backward(const uint8_t* host_labels,
                        const GradientsReadyCallback& ready);
  // Host gradients, same layout as the parameters; valid after Backward.
  absl::Span<const float> gradients() const { return host_gradients_; }

  // Loss and accuracy over dataset samples [begin, end) in batches of up to
  // `batch` (<= max_batch()); uses the parameters set last. InvalidArgument
  // for a bad range or batch.
  absl::StatusOr<EvalResult> Evaluate(const Dataset& dataset, int64_t begin,
                                      int64_t end, int batch);

 private:
  struct Layer;

  Model(ModelKind kind, Backend* backend, int max_batch);
  absl::Status Build();
  void AddTensor(const std::string& name, std::vector<int64_t> shape,
                 float init_std);
  absl::Status CopyLabelsIn(const uint8_t* host_labels);

  const ModelKind kind_;
  Backend* const backend_;
  const int max_batch_;
  std::vector<Layer> layers_;
  std::vector<TensorInfo> tensors_;
  std::vector<float> init_std_;  // per tensor; 0 for biases
  size_t parameter_count_ = 0;

  // Backend memory, owned (freed in the destructor). activations_[i] is the
  // input of layer i, activations_[layers_.size()] the logits;
  // activation_grads_ likewise. Flatten's output aliases its input.
  std::vector<void*> owned_;
  float* params_ = nullptr;
  float* grads_ = nullptr;
  std::vector<float*> activations_;
  std::vector<float*> activation_grads_;
  uint8_t* labels_ = nullptr;
  float* loss_ = nullptr;
  int32_t* correct_ = nullptr;

  int batch_ = 0;  // of the last Forward; 0 before any
  std::vector<float> host_gradients_;
};

}  // namespace train
}  // namespace starling

#endif  // STARLING_WORKER_TRAIN_MODEL_H_
