// Model. The network is a list of layers over per-sample shapes (c, h, w);
// activations_[i] is layer i's input for up to max_batch samples. Forward
// runs the layers in order; Backward starts from the softmax cross-entropy
// gradient of the logits and walks back, for each layer with parameters:
// weight and bias gradients into the backend's gradient buffer, copied out
// to the host vector (one copy: weight and bias are adjacent), the callback,
// then the input gradient (skipped for the first layer, nobody needs it).
#include "worker/train/model.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"

namespace starling {
namespace train {

struct Model::Layer {
  enum class Kind { kLinear, kConv2d, kRelu, kMaxPool, kFlatten };
  Kind kind;
  // Per-sample input and output shapes.
  int in_c, in_h, in_w;
  int out_c, out_h, out_w;
  int kernel = 0, padding = 0;
  int weight = -1, bias = -1;  // tensor indices

  size_t in_elements() const { return static_cast<size_t>(in_c) * in_h * in_w; }
  size_t out_elements() const {
    return static_cast<size_t>(out_c) * out_h * out_w;
  }
  Conv2dShape conv(int batch) const {
    Conv2dShape s;
    s.batch = batch;
    s.in_channels = in_c;
    s.height = in_h;
    s.width = in_w;
    s.out_channels = out_c;
    s.kernel = kernel;
    s.padding = padding;
    return s;
  }
  Pool2dShape pool(int batch) const {
    Pool2dShape s;
    s.batch = batch;
    s.channels = in_c;
    s.height = in_h;
    s.width = in_w;
    return s;
  }
};

namespace {

constexpr double kPi = 3.14159265358979323846;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

absl::StatusOr<ModelKind> ParseModelKind(absl::string_view name) {
  if (name == "mlp") return ModelKind::kMlp;
  if (name == "cnn") return ModelKind::kCnn;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown model \"", name,
      "\"; expected \"mlp\" (784-256-128-10) or \"cnn\" (LeNet-style)"));
}

absl::string_view ModelKindName(ModelKind kind) {
  return kind == ModelKind::kMlp ? "mlp" : "cnn";
}

Model::Model(ModelKind kind, Backend* backend, int max_batch)
    : kind_(kind), backend_(backend), max_batch_(max_batch) {}

Model::~Model() {
  for (void* p : owned_) backend_->Free(p);
}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(ModelKind kind,
                                                     Backend* backend,
                                                     int max_batch) {
  if (max_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("model max_batch must be >= 1, got ", max_batch));
  }
  std::unique_ptr<Model> model(new Model(kind, backend, max_batch));
  absl::Status status = model->Build();
  if (!status.ok()) return status;
  return model;
}

void Model::AddTensor(const std::string& name, std::vector<int64_t> shape,
                      float init_std) {
  TensorInfo t;
  t.name = name;
  t.elements = 1;
  for (int64_t d : shape) t.elements *= static_cast<size_t>(d);
  t.shape = std::move(shape);
  t.offset = parameter_count_;
  parameter_count_ += t.elements;
  tensors_.push_back(std::move(t));
  init_std_.push_back(init_std);
}

absl::Status Model::Build() {
  int c = kImageChannels, h = kImageSide, w = kImageSide;
  // Adds a layer from the current shape; returns it for the caller to fill.
  auto add = [&](Layer::Kind kind, int out_c, int out_h, int out_w) -> Layer& {
    Layer l;
    l.kind = kind;
    l.in_c = c;
    l.in_h = h;
    l.in_w = w;
    l.out_c = out_c;
    l.out_h = out_h;
    l.out_w = out_w;
    c = out_c;
    h = out_h;
    w = out_w;
    layers_.push_back(l);
    return layers_.back();
  };
  auto linear = [&](const std::string& name, int out, bool last) {
    const int in = c * h * w;
    Layer& l = add(Layer::Kind::kLinear, out, 1, 1);
    const float std =
        last ? std::sqrt(2.0f / (in + out)) : std::sqrt(2.0f / in);
    l.weight = static_cast<int>(tensors_.size());
    AddTensor(name + ".weight", {out, in}, std);
    l.bias = static_cast<int>(tensors_.size());
    AddTensor(name + ".bias", {out}, 0.0f);
  };
  auto conv = [&](const std::string& name, int out_c) {
    const int in_c = c, k = 5;
    Layer& l = add(Layer::Kind::kConv2d, out_c, h, w);  // pad 2 keeps h, w
    l.kernel = k;
    l.padding = 2;
    l.weight = static_cast<int>(tensors_.size());
    AddTensor(name + ".weight", {out_c, in_c, k, k},
              std::sqrt(2.0f / (in_c * k * k)));
    l.bias = static_cast<int>(tensors_.size());
    AddTensor(name + ".bias", {out_c}, 0.0f);
  };
  auto relu = [&] { add(Layer::Kind::kRelu, c, h, w); };
  auto pool = [&] { add(Layer::Kind::kMaxPool, c, h / 2, w / 2); };
  auto flatten = [&] { add(Layer::Kind::kFlatten, c * h * w, 1, 1); };

  if (kind_ == ModelKind::kMlp) {
    flatten();
    linear("fc1", 256, false);
    relu();
    linear("fc2", 128, false);
    relu();
    linear("fc3", kNumClasses, true);
  } else {
    conv("conv1", 16);
    relu();
    pool();
    conv("conv2", 32);
    relu();
    pool();
    flatten();
    linear("fc1", 128, false);
    relu();
    linear("fc2", kNumClasses, true);
  }

  auto alloc = [&](size_t bytes) -> absl::StatusOr<void*> {
    absl::StatusOr<void*> p = backend_->Allocate(bytes);
    if (p.ok()) owned_.push_back(*p);
    return p;
  };
  auto alloc_floats = [&](size_t n, float** out) -> absl::Status {
    absl::StatusOr<void*> p = alloc(n * sizeof(float));
    if (!p.ok()) return p.status();
    *out = static_cast<float*>(*p);
    return absl::OkStatus();
  };
  absl::Status s = alloc_floats(parameter_count_, &params_);
  if (s.ok()) s = alloc_floats(parameter_count_, &grads_);
  if (!s.ok()) return s;
  backend_->Zero(params_, parameter_count_);
  backend_->Zero(grads_, parameter_count_);

  activations_.resize(layers_.size() + 1);
  activation_grads_.resize(layers_.size() + 1);
  const size_t mb = static_cast<size_t>(max_batch_);
  s = alloc_floats(mb * layers_[0].in_elements(), &activations_[0]);
  if (s.ok())
    s = alloc_floats(mb * layers_[0].in_elements(), &activation_grads_[0]);
  for (size_t i = 0; s.ok() && i < layers_.size(); ++i) {
    if (layers_[i].kind == Layer::Kind::kFlatten) {
      activations_[i + 1] = activations_[i];
      activation_grads_[i + 1] = activation_grads_[i];
      continue;
    }
    s = alloc_floats(mb * layers_[i].out_elements(), &activations_[i + 1]);
    if (s.ok()) {
      s = alloc_floats(mb * layers_[i].out_elements(),
                       &activation_grads_[i + 1]);
    }
  }
  if (!s.ok()) return s;
  absl::StatusOr<void*> p = alloc(mb);
  if (!p.ok()) return p.status();
  labels_ = static_cast<uint8_t*>(*p);
  if (!(s = alloc_floats(1, &loss_)).ok()) return s;
  p = alloc(sizeof(int32_t));
  if (!p.ok()) return p.status();
  correct_ = static_cast<int32_t*>(*p);

  host_gradients_.assign(parameter_count_, 0.0f);
  return absl::OkStatus();
}

void Model::InitParameters(uint64_t seed, absl::Span<float> flat) const {
  for (size_t t = 0; t < tensors_.size(); ++t) {
    float* out = flat.data() + tensors_[t].offset;
    const size_t n = tensors_[t].elements;
    const double std = init_std_[t];
    if (std == 0.0) {
      for (size_t i = 0; i < n; ++i) out[i] = 0.0f;
      continue;
    }
    std::mt19937_64 gen(SplitMix64(seed ^ SplitMix64(t + 1)));
    // Box-Muller: u1 in (0, 1], u2 in [0, 1) from the top 53 bits; each pair
    // gives two independent standard normals.
    for (size_t i = 0; i < n; i += 2) {
      const double u1 = static_cast<double>((gen() >> 11) + 1) * 0x1.0p-53;
      const double u2 = static_cast<double>(gen() >> 11) * 0x1.0p-53;
      const double r = std::sqrt(-2.0 * std::log(u1));
      const double a = 2.0 * kPi * u2;
      out[i] = static_cast<float>(std * r * std::cos(a));
      if (i + 1 < n) out[i + 1] = static_cast<float>(std * r * std::sin(a));
    }
  }
}

absl::Status Model::SetParameters(absl::Span<const float> flat) {
  if (flat.size() != parameter_count_) {
    return absl::InvalidArgumentError(absl::StrCat(
        ModelKindName(kind_), " model has ", parameter_count_,
        " parameters, SetParameters got ", flat.size(), " floats"));
  }
  return backend_->CopyIn(params_, flat.data(), flat.size() * sizeof(float));
}

absl::Status Model::GetParameters(absl::Span<float> flat) const {
  if (flat.size() != parameter_count_) {
    return absl::InvalidArgumentError(absl::StrCat(
        ModelKindName(kind_), " model has ", parameter_count_,
        " parameters, GetParameters got room for ", flat.size(), " floats"));
  }
  return backend_->CopyOut(flat.data(), params_, flat.size() * sizeof(float));
}

absl::Status Model::Forward(const float* host_x, int batch) {
  if (batch < 1 || batch > max_batch_) {
    return absl::InvalidArgumentError(
        absl::StrCat("forward batch ", batch, " out of range 1..", max_batch_));
  }
  absl::Status s = backend_->CopyIn(
      activations_[0], host_x,
      static_cast<size_t>(batch) * layers_[0].in_elements() * sizeof(float));
  if (!s.ok()) return s;
  batch_ = batch;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    const float* x = activations_[i];
    float* y = activations_[i + 1];
    switch (l.kind) {
      case Layer::Kind::kLinear: {
        const int in = static_cast<int>(l.in_elements());
        const float* wt = params_ + tensors_[l.weight].offset;
        // y [batch, out] = x [batch, in] * W^T, W [out, in].
        backend_->Gemm(false, true, batch, l.out_c, in, 1.0f, x, wt, 0.0f, y);
        backend_->AddBias(params_ + tensors_[l.bias].offset, batch, l.out_c, 1,
                          y);
        break;
      }
      case Layer::Kind::kConv2d:
        backend_->Conv2dForward(l.conv(batch), x,
                                params_ + tensors_[l.weight].offset, y);
        backend_->AddBias(params_ + tensors_[l.bias].offset, batch, l.out_c,
                          l.out_h * l.out_w, y);
        break;
      case Layer::Kind::kRelu:
        backend_->ReluForward(x, y, batch * l.in_elements());
        break;
      case Layer::Kind::kMaxPool:
        backend_->MaxPool2dForward(l.pool(batch), x, y);
        break;
      case Layer::Kind::kFlatten:
        break;  // y aliases x
    }
  }
  return absl::OkStatus();
}

absl::Status Model::CopyLabelsIn(const uint8_t* host_labels) {
  if (batch_ == 0) {
    return absl::FailedPreconditionError(
        "loss or backward called before any forward");
  }
  return backend_->CopyIn(labels_, host_labels, static_cast<size_t>(batch_));
}

absl::StatusOr<float> Model::Loss(const uint8_t* host_labels) {
  absl::Status s = CopyLabelsIn(host_labels);
  if (!s.ok()) return s;
  backend_->SoftmaxCrossEntropy(activations_.back(), labels_, batch_,
                                kNumClasses, loss_, nullptr);
  float loss = 0.0f;
  s = backend_->CopyOut(&loss, loss_, sizeof(float));
  if (!s.ok()) return s;
  return loss;
}

absl::Status Model::CopyLogits(float* host_logits) const {
  if (batch_ == 0) {
    return absl::FailedPreconditionError("CopyLogits before any forward");
  }
  return backend_->CopyOut(
      host_logits, activations_.back(),
      static_cast<size_t>(batch_) * kNumClasses * sizeof(float));
}

absl::Status Model::Backward(const uint8_t* host_labels,
                             const GradientsReadyCallback& ready) {
  absl::Status s = CopyLabelsIn(host_labels);
  if (!s.ok()) return s;
  const int batch = batch_;
  backend_->SoftmaxCrossEntropy(activations_.back(), labels_, batch,
                                kNumClasses, loss_, activation_grads_.back());
  for (size_t i = layers_.size(); i-- > 0;) {
    const Layer& l = layers_[i];
    const float* x = activations_[i];
    const float* y = activations_[i + 1];
    const float* dy = activation_grads_[i + 1];
    float* dx = activation_grads_[i];
    const bool need_dx = i > 0;
    if (l.kind == Layer::Kind::kLinear || l.kind == Layer::Kind::kConv2d) {
      const TensorInfo& wt = tensors_[l.weight];
      const TensorInfo& bt = tensors_[l.bias];
      if (l.kind == Layer::Kind::kLinear) {
        const int in = static_cast<int>(l.in_elements());
        // dW [out, in] = dy^T [out, batch] * x [batch, in].
        backend_->Gemm(true, false, l.out_c, in, batch, 1.0f, dy, x, 0.0f,
                       grads_ + wt.offset);
        backend_->BiasGradient(dy, batch, l.out_c, 1, grads_ + bt.offset);
      } else {
        backend_->Conv2dBackwardFilter(l.conv(batch), x, dy,
                                       grads_ + wt.offset);
        backend_->BiasGradient(dy, batch, l.out_c, l.out_h * l.out_w,
                               grads_ + bt.offset);
      }
      // Weight and bias are adjacent: one copy for the layer.
      s = backend_->CopyOut(host_gradients_.data() + wt.offset,
                            grads_ + wt.offset,
                            (wt.elements + bt.elements) * sizeof(float));
      if (!s.ok()) return s;
      if (ready) ready({l.weight, l.bias});
      if (!need_dx) continue;
      if (l.kind == Layer::Kind::kLinear) {
        const int in = static_cast<int>(l.in_elements());
        // dx [batch, in] = dy [batch, out] * W [out, in].
        backend_->Gemm(false, false, batch, in, l.out_c, 1.0f, dy,
                       params_ + wt.offset, 0.0f, dx);
      } else {
        backend_->Conv2dBackwardData(l.conv(batch), params_ + wt.offset, dy,
                                     dx);
      }
      continue;
    }
    if (!need_dx) continue;
    switch (l.kind) {
      case Layer::Kind::kRelu:
        backend_->ReluBackward(y, dy, dx, batch * l.in_elements());
        break;
      case Layer::Kind::kMaxPool:
        backend_->MaxPool2dBackward(l.pool(batch), x, y, dy, dx);
        break;
      default:
        break;  // flatten: dx aliases dy
    }
  }
  return backend_->Synchronize();
}

absl::StatusOr<EvalResult> Model::Evaluate(const Dataset& dataset,
                                           int64_t begin, int64_t end,
                                           int batch) {
  if (begin < 0 || end < begin || end > dataset.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "evaluate range [", begin, ", ", end, ") is not inside the dataset's ",
        dataset.size(), " samples"));
  }
  if (batch < 1 || batch > max_batch_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "evaluate batch ", batch, " out of range 1..", max_batch_));
  }
  EvalResult result;
  for (int64_t at = begin; at < end; at += batch) {
    const int b = static_cast<int>(std::min<int64_t>(batch, end - at));
    // Samples are contiguous in the dataset: no gather needed.
    absl::Status s = Forward(dataset.image(at), b);
    if (!s.ok()) return s;
    s = CopyLabelsIn(dataset.labels().data() + at);
    if (!s.ok()) return s;
    backend_->SoftmaxCrossEntropy(activations_.back(), labels_, b, kNumClasses,
                                  loss_, nullptr);
    backend_->CountCorrect(activations_.back(), labels_, b, kNumClasses,
                           correct_);
    float loss = 0.0f;
    int32_t correct = 0;
    s = backend_->CopyOut(&loss, loss_, sizeof(loss));
    if (s.ok()) s = backend_->CopyOut(&correct, correct_, sizeof(correct));
    if (!s.ok()) return s;
    result.loss_sum += static_cast<double>(loss) * b;
    result.correct += correct;
    result.count += b;
  }
  return result;
}

}  // namespace train
}  // namespace starling
