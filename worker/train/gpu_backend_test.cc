// The GPU backend against the CPU backend: each kernel on random inputs, then
// whole MLP and CNN forward and backward passes on the same parameters and
// batch. Tolerances are relative to the largest magnitude in the CPU result
// (floor 1e-6): 1e-4 for GEMM, convolution, bias gradient and softmax
// cross-entropy (FP32 with a different summation order), exact for ReLU,
// bias add, pooling and the correct count, 1e-3 for model gradients (errors
// compound through the layers). Without a CUDA device the GPU cases skip.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "worker/train/backend.h"
#include "worker/train/model.h"

namespace starling {
namespace train {
namespace {

std::vector<float> RandomFloats(size_t n, uint64_t seed, float lo = -1.0f,
                                float hi = 1.0f) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// Values from a handful of levels, so that pooling windows and argmaxes tie.
std::vector<float> TiedFloats(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(static_cast<int>(gen() % 4)) - 1.0f;
  return v;
}

std::vector<uint8_t> RandomLabels(size_t n, int classes, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& x : v) x = static_cast<uint8_t>(gen() % classes);
  return v;
}

// n elements of T in both backends, freed on scope exit.
template <typename T>
class Twin {
 public:
  Twin(Backend* cpu, Backend* gpu, size_t n) : cpu_(cpu), gpu_(gpu), n_(n) {
    absl::StatusOr<void*> c = cpu->Allocate(n * sizeof(T));
    absl::StatusOr<void*> g = gpu->Allocate(n * sizeof(T));
    EXPECT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(g.ok()) << g.status();
    if (c.ok()) cpu_ptr_ = static_cast<T*>(*c);
    if (g.ok()) gpu_ptr_ = static_cast<T*>(*g);
  }
  Twin(Backend* cpu, Backend* gpu, const std::vector<T>& values)
      : Twin(cpu, gpu, values.size()) {
    Set(values);
  }
  Twin(const Twin&) = delete;
  Twin& operator=(const Twin&) = delete;
  ~Twin() {
    cpu_->Free(cpu_ptr_);
    gpu_->Free(gpu_ptr_);
  }

  void Set(const std::vector<T>& values) {
    ASSERT_EQ(values.size(), n_);
    EXPECT_TRUE(cpu_->CopyIn(cpu_ptr_, values.data(), n_ * sizeof(T)).ok());
    const absl::Status status =
        gpu_->CopyIn(gpu_ptr_, values.data(), n_ * sizeof(T));
    EXPECT_TRUE(status.ok()) << status;
  }
  std::vector<T> CpuValues() const { return Values(cpu_, cpu_ptr_); }
  std::vector<T> GpuValues() const { return Values(gpu_, gpu_ptr_); }

  T* cpu() const { return cpu_ptr_; }
  T* gpu() const { return gpu_ptr_; }

 private:
  std::vector<T> Values(Backend* backend, const T* ptr) const {
    std::vector<T> out(n_);
    const absl::Status status =
        backend->CopyOut(out.data(), ptr, n_ * sizeof(T));
    EXPECT_TRUE(status.ok()) << backend->name() << ": " << status;
    return out;
  }

  Backend* const cpu_;
  Backend* const gpu_;
  const size_t n_;
  T* cpu_ptr_ = nullptr;
  T* gpu_ptr_ = nullptr;
};

// |got - want| <= rtol * max(max |want|, 1e-6) elementwise; rtol 0: exact.
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 float rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float scale = 1e-6f;
  for (float w : want) scale = std::max(scale, std::fabs(w));
  const float tolerance = rtol * scale;
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const bool ok = rtol == 0.0f ? got[i] == want[i]
                                 : std::fabs(got[i] - want[i]) <= tolerance;
    if (!ok && ++bad <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: gpu " << got[i] << ", cpu "
                    << want[i] << " (tolerance " << tolerance << ")";
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << want.size()
                     << " elements differ";
}

template <typename T>
void ExpectTwinClose(const Twin<T>& twin, float rtol, const std::string& what) {
  ExpectClose(twin.GpuValues(), twin.CpuValues(), rtol, what);
}

TEST(GpuBackendFactory, GpuIsUsableOrUnavailableWithReason) {
  absl::StatusOr<std::unique_ptr<Backend>> gpu = CreateBackend("gpu");
  if (gpu.ok()) {
    EXPECT_EQ((*gpu)->name().rfind("gpu (", 0), 0u) << (*gpu)->name();
    EXPECT_NE((*gpu)->name().find("cuDNN"), std::string::npos);
    return;
  }
  EXPECT_EQ(gpu.status().code(), absl::StatusCode::kUnavailable)
      << gpu.status();
  EXPECT_NE(gpu.status().message().find("CUDA"), std::string::npos)
      << gpu.status();
}

class GpuBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Backend>> gpu = CreateBackend("gpu");
    if (!gpu.ok()) {
      GTEST_SKIP() << "no usable CUDA device: " << gpu.status();
    }
    gpu_ = *std::move(gpu);
    cpu_ = CreateCpuBackend();
  }

  Backend* cpu() { return cpu_.get(); }
  Backend* gpu() { return gpu_.get(); }

  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<Backend> gpu_;
};

TEST_F(GpuBackendTest, MemoryRoundTripAndZero) {
  EXPECT_TRUE(gpu()->Allocate(0).ok());
  gpu()->Free(nullptr);
  const std::vector<float> values = RandomFloats(1000, 1);
  Twin<float> t(cpu(), gpu(), values);
  EXPECT_EQ(t.GpuValues(), values);
  cpu()->Zero(t.cpu() + 100, 500);
  gpu()->Zero(t.gpu() + 100, 500);
  ExpectTwinClose(t, 0.0f, "zero");
  EXPECT_TRUE(gpu()->Synchronize().ok());
}

TEST_F(GpuBackendTest, GemmMatchesCpu) {
  const int m = 37, n = 53, k = 71;
  for (int trans_a = 0; trans_a < 2; ++trans_a) {
    for (int trans_b = 0; trans_b < 2; ++trans_b) {
      const std::string what = "gemm trans_a=" + std::to_string(trans_a) +
                               " trans_b=" + std::to_string(trans_b);
      Twin<float> a(cpu(), gpu(), RandomFloats(m * k, 2));
      Twin<float> b(cpu(), gpu(), RandomFloats(k * n, 3));
      Twin<float> c(cpu(), gpu(), RandomFloats(m * n, 4));
      for (Backend* be : {cpu(), gpu()}) {
        const bool is_cpu = be == cpu();
        be->Gemm(trans_a, trans_b, m, n, k, 0.7f, is_cpu ? a.cpu() : a.gpu(),
                 is_cpu ? b.cpu() : b.gpu(), 0.3f, is_cpu ? c.cpu() : c.gpu());
      }
      ExpectTwinClose(c, 1e-4f, what);

      // beta == 0 ignores NaN in C.
      c.Set(std::vector<float>(m * n, std::numeric_limits<float>::quiet_NaN()));
      cpu()->Gemm(trans_a, trans_b, m, n, k, 1.0f, a.cpu(), b.cpu(), 0.0f,
                  c.cpu());
      gpu()->Gemm(trans_a, trans_b, m, n, k, 1.0f, a.gpu(), b.gpu(), 0.0f,
                  c.gpu());
      ExpectTwinClose(c, 1e-4f, what + " beta 0 over NaN");
    }
  }
  // k == 0: C = beta * C.
  Twin<float> c(cpu(), gpu(), RandomFloats(6, 5));
  cpu()->Gemm(false, false, 2, 3, 0, 1.0f, nullptr, nullptr, 0.5f, c.cpu());
  gpu()->Gemm(false, false, 2, 3, 0, 1.0f, nullptr, nullptr, 0.5f, c.gpu());
  ExpectTwinClose(c, 0.0f, "gemm k 0");
  cpu()->Gemm(false, false, 2, 3, 0, 1.0f, nullptr, nullptr, 0.0f, c.cpu());
  gpu()->Gemm(false, false, 2, 3, 0, 1.0f, nullptr, nullptr, 0.0f, c.gpu());
  ExpectTwinClose(c, 0.0f, "gemm k 0 beta 0");
}

TEST_F(GpuBackendTest, BiasMatchesCpu) {
  struct Case {
    int outer, channels, inner;
  };
  for (const Case& s : {Case{9, 17, 1}, Case{5, 7, 11 * 13}}) {
    const std::string what = "bias " + std::to_string(s.outer) + "x" +
                             std::to_string(s.channels) + "x" +
                             std::to_string(s.inner);
    const size_t n = static_cast<size_t>(s.outer) * s.channels * s.inner;
    Twin<float> bias(cpu(), gpu(), RandomFloats(s.channels, 6));
    Twin<float> y(cpu(), gpu(), RandomFloats(n, 7));
    Twin<float> db(cpu(), gpu(), s.channels);
    cpu()->AddBias(bias.cpu(), s.outer, s.channels, s.inner, y.cpu());
    gpu()->AddBias(bias.gpu(), s.outer, s.channels, s.inner, y.gpu());
    ExpectTwinClose(y, 0.0f, what + " AddBias");
    cpu()->BiasGradient(y.cpu(), s.outer, s.channels, s.inner, db.cpu());
    gpu()->BiasGradient(y.gpu(), s.outer, s.channels, s.inner, db.gpu());
    ExpectTwinClose(db, 1e-4f, what + " BiasGradient");
  }
}

TEST_F(GpuBackendTest, ReluMatchesCpu) {
  const size_t n = 10007;
  Twin<float> x(cpu(), gpu(), RandomFloats(n, 8));
  Twin<float> y(cpu(), gpu(), n);
  Twin<float> dy(cpu(), gpu(), RandomFloats(n, 9));
  Twin<float> dx(cpu(), gpu(), n);
  cpu()->ReluForward(x.cpu(), y.cpu(), n);
  gpu()->ReluForward(x.gpu(), y.gpu(), n);
  ExpectTwinClose(y, 0.0f, "ReluForward");
  cpu()->ReluBackward(y.cpu(), dy.cpu(), dx.cpu(), n);
  gpu()->ReluBackward(y.gpu(), dy.gpu(), dx.gpu(), n);
  ExpectTwinClose(dx, 0.0f, "ReluBackward");
  // In place.
  cpu()->ReluBackward(y.cpu(), dy.cpu(), dy.cpu(), n);
  gpu()->ReluBackward(y.gpu(), dy.gpu(), dy.gpu(), n);
  ExpectTwinClose(dy, 0.0f, "ReluBackward in place");
  cpu()->ReluForward(x.cpu(), x.cpu(), n);
  gpu()->ReluForward(x.gpu(), x.gpu(), n);
  ExpectTwinClose(x, 0.0f, "ReluForward in place");
}

TEST_F(GpuBackendTest, ConvolutionMatchesCpu) {
  Conv2dShape small;
  small.batch = 3;
  small.in_channels = 2;
  small.height = 9;
  small.width = 8;
  small.out_channels = 4;
  small.kernel = 3;
  small.padding = 1;
  Conv2dShape conv1;  // the CNN's first layer
  conv1.batch = 2;
  conv1.in_channels = 1;
  conv1.height = 28;
  conv1.width = 28;
  conv1.out_channels = 16;
  conv1.kernel = 5;
  conv1.padding = 2;
  Conv2dShape valid;  // no padding, output smaller than input
  valid.batch = 2;
  valid.in_channels = 3;
  valid.height = 7;
  valid.width = 10;
  valid.out_channels = 5;
  valid.kernel = 5;
  valid.padding = 0;
  int seed = 10;
  for (const Conv2dShape& s : {small, conv1, valid, small}) {
    const std::string what =
        "conv " + std::to_string(s.height) + "x" + std::to_string(s.width) +
        " k" + std::to_string(s.kernel) + " pad " + std::to_string(s.padding);
    Twin<float> x(cpu(), gpu(), RandomFloats(s.input_elements(), ++seed));
    Twin<float> w(cpu(), gpu(), RandomFloats(s.filter_elements(), ++seed));
    Twin<float> dy(cpu(), gpu(), RandomFloats(s.output_elements(), ++seed));
    Twin<float> y(cpu(), gpu(), s.output_elements());
    Twin<float> dx(cpu(), gpu(), s.input_elements());
    Twin<float> dw(cpu(), gpu(), s.filter_elements());
    cpu()->Conv2dForward(s, x.cpu(), w.cpu(), y.cpu());
    gpu()->Conv2dForward(s, x.gpu(), w.gpu(), y.gpu());
    ExpectTwinClose(y, 1e-4f, what + " forward");
    cpu()->Conv2dBackwardData(s, w.cpu(), dy.cpu(), dx.cpu());
    gpu()->Conv2dBackwardData(s, w.gpu(), dy.gpu(), dx.gpu());
    ExpectTwinClose(dx, 1e-4f, what + " backward data");
    cpu()->Conv2dBackwardFilter(s, x.cpu(), dy.cpu(), dw.cpu());
    gpu()->Conv2dBackwardFilter(s, x.gpu(), dy.gpu(), dw.gpu());
    ExpectTwinClose(dw, 1e-4f, what + " backward filter");
  }
}

TEST_F(GpuBackendTest, MaxPoolMatchesCpu) {
  Pool2dShape even;
  even.batch = 2;
  even.channels = 3;
  even.height = 8;
  even.width = 6;
  Pool2dShape odd;  // the last row and column are ignored
  odd.batch = 3;
  odd.channels = 2;
  odd.height = 7;
  odd.width = 9;
  int seed = 30;
  for (const Pool2dShape& s : {even, odd}) {
    for (bool ties : {false, true}) {
      const std::string what = "maxpool " + std::to_string(s.height) + "x" +
                               std::to_string(s.width) +
                               (ties ? " with ties" : "");
      Twin<float> x(cpu(), gpu(),
                    ties ? TiedFloats(s.input_elements(), ++seed)
                         : RandomFloats(s.input_elements(), ++seed));
      Twin<float> y(cpu(), gpu(), s.output_elements());
      Twin<float> dy(cpu(), gpu(), RandomFloats(s.output_elements(), ++seed));
      Twin<float> dx(cpu(), gpu(), RandomFloats(s.input_elements(), ++seed));
      cpu()->MaxPool2dForward(s, x.cpu(), y.cpu());
      gpu()->MaxPool2dForward(s, x.gpu(), y.gpu());
      ExpectTwinClose(y, 0.0f, what + " forward");
      cpu()->MaxPool2dBackward(s, x.cpu(), y.cpu(), dy.cpu(), dx.cpu());
      gpu()->MaxPool2dBackward(s, x.gpu(), y.gpu(), dy.gpu(), dx.gpu());
      ExpectTwinClose(dx, 0.0f, what + " backward");
    }
  }
}

TEST_F(GpuBackendTest, SoftmaxCrossEntropyMatchesCpu) {
  const int batch = 300, classes = 10;
  Twin<float> logits(cpu(), gpu(),
                     RandomFloats(batch * classes, 40, -8.0f, 8.0f));
  Twin<uint8_t> labels(cpu(), gpu(), RandomLabels(batch, classes, 41));
  Twin<float> loss(cpu(), gpu(), 1);
  Twin<float> grad(cpu(), gpu(), batch * classes);
  cpu()->SoftmaxCrossEntropy(logits.cpu(), labels.cpu(), batch, classes,
                             loss.cpu(), grad.cpu());
  gpu()->SoftmaxCrossEntropy(logits.gpu(), labels.gpu(), batch, classes,
                             loss.gpu(), grad.gpu());
  ExpectTwinClose(loss, 1e-4f, "cross-entropy loss");
  ExpectTwinClose(grad, 1e-4f, "cross-entropy gradient");
  // Loss only.
  gpu()->Zero(loss.gpu(), 1);
  gpu()->SoftmaxCrossEntropy(logits.gpu(), labels.gpu(), batch, classes,
                             loss.gpu(), nullptr);
  ExpectTwinClose(loss, 1e-4f, "cross-entropy loss without gradient");
}

TEST_F(GpuBackendTest, CountCorrectMatchesCpu) {
  const int batch = 513, classes = 10;
  for (bool ties : {false, true}) {
    Twin<float> logits(cpu(), gpu(),
                       ties ? TiedFloats(batch * classes, 50)
                            : RandomFloats(batch * classes, 51));
    Twin<uint8_t> labels(cpu(), gpu(), RandomLabels(batch, classes, 52));
    Twin<int32_t> correct(cpu(), gpu(), 1);
    cpu()->CountCorrect(logits.cpu(), labels.cpu(), batch, classes,
                        correct.cpu());
    gpu()->CountCorrect(logits.gpu(), labels.gpu(), batch, classes,
                        correct.gpu());
    EXPECT_EQ(correct.GpuValues(), correct.CpuValues())
        << (ties ? "with ties" : "random");
  }
}

TEST_F(GpuBackendTest, KernelErrorIsSticky) {
  Conv2dShape bad;  // a 5x5 filter on a 2x2 image without padding
  bad.batch = 1;
  bad.in_channels = 1;
  bad.height = 2;
  bad.width = 2;
  bad.out_channels = 1;
  bad.kernel = 5;
  Twin<float> buf(cpu(), gpu(), 64);
  gpu()->Conv2dForward(bad, buf.gpu(), buf.gpu(), buf.gpu());
  const absl::Status first = gpu()->Synchronize();
  EXPECT_EQ(first.code(), absl::StatusCode::kInvalidArgument) << first;
  EXPECT_NE(first.message().find("Conv2dForward"), std::string::npos) << first;
  gpu()->Zero(buf.gpu(), 64);
  float host[64];
  EXPECT_EQ(gpu()->CopyOut(host, buf.gpu(), sizeof(host)), first);
  EXPECT_EQ(gpu()->Synchronize(), first);
}

void ExpectModelsAgree(ModelKind kind, Backend* cpu, Backend* gpu) {
  const int batch = 16;
  absl::StatusOr<std::unique_ptr<Model>> cpu_model =
      Model::Create(kind, cpu, batch);
  absl::StatusOr<std::unique_ptr<Model>> gpu_model =
      Model::Create(kind, gpu, batch);
  ASSERT_TRUE(cpu_model.ok()) << cpu_model.status();
  ASSERT_TRUE(gpu_model.ok()) << gpu_model.status();
  Model& c = **cpu_model;
  Model& g = **gpu_model;
  std::vector<float> params(c.parameter_count());
  c.InitParameters(7, absl::MakeSpan(params));
  ASSERT_TRUE(c.SetParameters(params).ok());
  ASSERT_TRUE(g.SetParameters(params).ok());

  const std::vector<float> x = RandomFloats(batch * 28 * 28, 60, -1.0f, 2.0f);
  const std::vector<uint8_t> labels = RandomLabels(batch, 10, 61);
  ASSERT_TRUE(c.Forward(x.data(), batch).ok());
  const absl::Status forward = g.Forward(x.data(), batch);
  ASSERT_TRUE(forward.ok()) << forward;

  std::vector<float> cpu_logits(batch * 10), gpu_logits(batch * 10);
  ASSERT_TRUE(c.CopyLogits(cpu_logits.data()).ok());
  ASSERT_TRUE(g.CopyLogits(gpu_logits.data()).ok());
  ExpectClose(gpu_logits, cpu_logits, 1e-4f, "logits");

  absl::StatusOr<float> cpu_loss = c.Loss(labels.data());
  absl::StatusOr<float> gpu_loss = g.Loss(labels.data());
  ASSERT_TRUE(cpu_loss.ok()) << cpu_loss.status();
  ASSERT_TRUE(gpu_loss.ok()) << gpu_loss.status();
  EXPECT_NEAR(*gpu_loss, *cpu_loss, 1e-4 * std::max(1.0f, *cpu_loss));

  ASSERT_TRUE(c.Backward(labels.data(), GradientsReadyCallback()).ok());
  const absl::Status backward =
      g.Backward(labels.data(), GradientsReadyCallback());
  ASSERT_TRUE(backward.ok()) << backward;
  for (const TensorInfo& t : c.tensors()) {
    const auto slice = [&t](absl::Span<const float> all) {
      return std::vector<float>(all.begin() + t.offset,
                                all.begin() + t.offset + t.elements);
    };
    ExpectClose(slice(g.gradients()), slice(c.gradients()), 1e-3f,
                std::string(ModelKindName(kind)) + " gradient " + t.name);
  }
}

TEST_F(GpuBackendTest, MlpForwardBackwardMatchesCpu) {
  ExpectModelsAgree(ModelKind::kMlp, cpu(), gpu());
}

TEST_F(GpuBackendTest, CnnForwardBackwardMatchesCpu) {
  ExpectModelsAgree(ModelKind::kCnn, cpu(), gpu());
}

}  // namespace
}  // namespace train
}  // namespace starling
