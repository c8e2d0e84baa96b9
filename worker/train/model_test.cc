#include "worker/train/model.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "worker/train/backend.h"
#include "worker/train/dataset.h"

namespace starling {
namespace train {
namespace {

std::vector<float> RandomInputs(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<float> v(n);
  for (float& x : v) {
    x = static_cast<float>(static_cast<double>(gen() >> 11) * 0x1.0p-53 * 4.0 -
                           2.0);
  }
  return v;
}

std::unique_ptr<Model> MakeModel(ModelKind kind, Backend* backend,
                                 int max_batch) {
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Create(kind, backend, max_batch);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

TEST(Model, ParameterCountsAndLayoutAreExact) {
  std::unique_ptr<Backend> backend = CreateCpuBackend();
  std::unique_ptr<Model> mlp = MakeModel(ModelKind::kMlp, backend.get(), 1);
  EXPECT_EQ(mlp->parameter_count(), 235146u);
  std::unique_ptr<Model> cnn = MakeModel(ModelKind::kCnn, backend.get(), 1);
  EXPECT_EQ(cnn->parameter_count(), 215370u);

  const std::vector<std::pair<std::string, size_t>> want_cnn = {
      {"conv1.weight", 400}, {"conv1.bias", 16},     {"conv2.weight", 12800},
      {"conv2.bias", 32},    {"fc1.weight", 200704}, {"fc1.bias", 128},
      {"fc2.weight", 1280},  {"fc2.bias", 10}};
  ASSERT_EQ(cnn->tensors().size(), want_cnn.size());
  size_t offset = 0;
  for (size_t i = 0; i < want_cnn.size(); ++i) {
    EXPECT_EQ(cnn->tensors()[i].name, want_cnn[i].first);
    EXPECT_EQ(cnn->tensors()[i].elements, want_cnn[i].second);
    EXPECT_EQ(cnn->tensors()[i].offset, offset);
    offset += want_cnn[i].second;
  }
  EXPECT_EQ(cnn->tensors()[2].shape, (std::vector<int64_t>{32, 16, 5, 5}));
  EXPECT_EQ(mlp->tensors()[0].name, "fc1.weight");
  EXPECT_EQ(mlp->tensors()[0].shape, (std::vector<int64_t>{256, 784}));
  EXPECT_EQ(mlp->tensors()[5].name, "fc3.bias");
}

TEST(Model, ParseModelKind) {
  EXPECT_EQ(*ParseModelKind("mlp"), ModelKind::kMlp);
  EXPECT_EQ(*ParseModelKind("cnn"), ModelKind::kCnn);
  absl::StatusOr<ModelKind> bad = ParseModelKind("resnet");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("resnet"), std::string::npos);
}

// Sample standard deviation and mean of a tensor.
std::pair<double, double> MeanStd(const float* p, size_t n) {
  double sum = 0, sq = 0;
  for (size_t i = 0; i < n; ++i) sum += p[i];
  const double mean = sum / n;
  for (size_t i = 0; i < n; ++i) sq += (p[i] - mean) * (p[i] - mean);
  return {mean, std::sqrt(sq / n)};
}

TEST(Model, InitParametersIsDeterministicWithTheDocumentedStd) {
  std::unique_ptr<Backend> backend = CreateCpuBackend();
  for (ModelKind kind : {ModelKind::kMlp, ModelKind::kCnn}) {
    std::unique_ptr<Model> model = MakeModel(kind, backend.get(), 1);
    std::vector<float> a(model->parameter_count()), b(a.size()), c(a.size());
    model->InitParameters(7, absl::MakeSpan(a));
    model->InitParameters(7, absl::MakeSpan(b));
    model->InitParameters(8, absl::MakeSpan(c));
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
    const std::vector<TensorInfo>& t = model->tensors();
    for (size_t i = 0; i < t.size(); ++i) {
      const float* p = a.data() + t[i].offset;
      if (t[i].shape.size() == 1) {  // bias
        for (size_t e = 0; e < t[i].elements; ++e) ASSERT_EQ(p[e], 0.0f);
        continue;
      }
      if (t[i].elements < 10000) continue;  // only the big layers
      size_t fan_in = t[i].elements / t[i].shape[0];
      const double want = std::sqrt(2.0 / fan_in);  // all big ones: He
      const auto [mean, std] = MeanStd(p, t[i].elements);
      EXPECT_NEAR(std, want, 0.05 * want) << t[i].name;
      EXPECT_NEAR(mean, 0.0, 0.05 * want) << t[i].name;
    }
    // The last weight is Glorot: fan_in 128, fan_out 10.
    const TensorInfo& last = t[t.size() - 2];
    const auto [mean, std] = MeanStd(a.data() + last.offset, last.elements);
    EXPECT_NEAR(std, std::sqrt(2.0 / 138), 0.1 * std::sqrt(2.0 / 138));
    (void)mean;
  }
}

TEST(Model, RejectsBadCalls) {
  std::unique_ptr<Backend> backend = CreateCpuBackend();
  EXPECT_EQ(Model::Create(ModelKind::kMlp, backend.get(), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::unique_ptr<Model> model = MakeModel(ModelKind::kMlp, backend.get(), 4);
  const uint8_t labels[4] = {0, 1, 2, 3};
  EXPECT_EQ(model->Backward(labels, nullptr).code(),
            absl::StatusCode::kFailedPrecondition);
  std::vector<float> x(5 * 784);
  EXPECT_EQ(model->Forward(x.data(), 5).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model->Forward(x.data(), 0).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> small(10);
  EXPECT_EQ(model->SetParameters(small).code(),
            absl::StatusCode::kInvalidArgument);
}

// Central finite differences of the model's float32 loss against Backward's
// gradients, on 6 random elements of every tensor. eps = 1e-3: the float32
// loss (~2.3) rounds at ~2e-7, so the difference quotient carries ~2e-4 of
// noise; a larger eps makes ReLU and max-pool switches inside [p - eps,
// p + eps] likely in the CNN (a conv1 weight moves thousands of activations;
// at eps = 5e-3 they cost a few percent). Tolerance: |analytic - numeric| <=
// 1e-3 + 3% of |numeric| (observed worst: about half of it).
void CheckGradients(ModelKind kind, int batch) {
  std::unique_ptr<Backend> backend = CreateCpuBackend();
  std::unique_ptr<Model> model = MakeModel(kind, backend.get(), batch);
  std::vector<float> params(model->parameter_count());
  model->InitParameters(42, absl::MakeSpan(params));
  // Non-zero biases so their gradients are exercised off the kink pattern.
  std::mt19937_64 gen(5);
  for (const TensorInfo& t : model->tensors()) {
    if (t.shape.size() != 1) continue;
    for (size_t e = 0; e < t.elements; ++e) {
      params[t.offset + e] = static_cast<float>(
          static_cast<double>(gen() >> 11) * 0x1.0p-53 * 0.2 - 0.1);
    }
  }
  const std::vector<float> x = RandomInputs(batch * kImageElements, 9);
  std::vector<uint8_t> labels(batch);
  for (int b = 0; b < batch; ++b)
    labels[b] = static_cast<uint8_t>((b * 7) % 10);

  ASSERT_TRUE(model->SetParameters(params).ok());
  ASSERT_TRUE(model->Forward(x.data(), batch).ok());
  std::vector<std::vector<int>> ready_order;
  ASSERT_TRUE(model
                  ->Backward(labels.data(),
                             [&](const std::vector<int>& t) {
                               ready_order.push_back(t);
                             })
                  .ok());
  const std::vector<float> grads(model->gradients().begin(),
                                 model->gradients().end());
  // Last layer first, each layer's weight and bias together.
  const int n = static_cast<int>(model->tensors().size());
  ASSERT_EQ(ready_order.size(), static_cast<size_t>(n / 2));
  for (int i = 0; i < n / 2; ++i) {
    EXPECT_EQ(ready_order[i], (std::vector<int>{n - 2 - 2 * i, n - 1 - 2 * i}));
  }

  auto loss_at = [&](const std::vector<float>& p) {
    EXPECT_TRUE(model->SetParameters(p).ok());
    EXPECT_TRUE(model->Forward(x.data(), batch).ok());
    absl::StatusOr<float> l = model->Loss(labels.data());
    EXPECT_TRUE(l.ok());
    return static_cast<double>(l.ok() ? *l : 0.0f);
  };
  const double eps = 1e-3;
  double worst = 0.0;
  for (const TensorInfo& t : model->tensors()) {
    for (int k = 0; k < 6; ++k) {
      const size_t e = t.offset + gen() % t.elements;
      std::vector<float> p = params;
      p[e] = params[e] + static_cast<float>(eps);
      const double up = loss_at(p);
      p[e] = params[e] - static_cast<float>(eps);
      const double down = loss_at(p);
      const double numeric = (up - down) / (2 * eps);
      const double err = std::abs(grads[e] - numeric);
      worst = std::max(worst, err / (1e-3 + 0.03 * std::abs(numeric)));
      EXPECT_LE(err, 1e-3 + 0.03 * std::abs(numeric))
          << t.name << " element " << e - t.offset << ": analytic " << grads[e]
          << " numeric " << numeric;
    }
  }
  std::cout << ModelKindName(kind) << " worst error / tolerance " << worst
            << "\n";
}

TEST(Model, MlpGradientsMatchFiniteDifferences) {
  CheckGradients(ModelKind::kMlp, 3);
}

TEST(Model, CnnGradientsMatchFiniteDifferences) {
  CheckGradients(ModelKind::kCnn, 2);
}

TEST(Model, EvaluateCountsAndMatchesLoss) {
  std::unique_ptr<Backend> backend = CreateCpuBackend();
  std::unique_ptr<Model> model = MakeModel(ModelKind::kMlp, backend.get(), 4);
  std::vector<float> params(model->parameter_count());
  model->InitParameters(1, absl::MakeSpan(params));
  ASSERT_TRUE(model->SetParameters(params).ok());
  const int n = 10;
  std::vector<uint8_t> pixels(n * kImageElements);
  std::mt19937_64 gen(3);
  for (uint8_t& p : pixels) p = static_cast<uint8_t>(gen() & 0xff);
  std::vector<uint8_t> labels(n);
  for (int i = 0; i < n; ++i) labels[i] = static_cast<uint8_t>(i % 10);
  Dataset data(pixels, labels);
  absl::StatusOr<EvalResult> all = model->Evaluate(data, 0, n, 4);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->count, n);
  // The same loss one sample at a time, and correct counted from logits.
  double loss_sum = 0.0;
  int64_t correct = 0;
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(model->Forward(data.image(i), 1).ok());
    loss_sum += *model->Loss(&labels[i]);
    float logits[kNumClasses];
    ASSERT_TRUE(model->CopyLogits(logits).ok());
    int best = 0;
    for (int c = 1; c < kNumClasses; ++c) {
      if (logits[c] > logits[best]) best = c;
    }
    correct += best == labels[i];
  }
  EXPECT_NEAR(all->loss_sum, loss_sum, 1e-4 * loss_sum);
  EXPECT_EQ(all->correct, correct);
  EXPECT_EQ(model->Evaluate(data, 5, 11, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace train
}  // namespace starling
