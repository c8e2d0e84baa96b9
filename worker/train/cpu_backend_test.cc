#include "worker/train/cpu_backend.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "worker/train/backend.h"

namespace starling {
namespace train {
namespace {

std::vector<float> Random(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<float> v(n);
  for (float& x : v) {
    x = static_cast<float>(static_cast<double>(gen() >> 11) * 0x1.0p-53 * 2.0 -
                           1.0);
  }
  return v;
}

// Relative-to-scale comparison: |a - b| <= tol * max(1, |b|).
void ExpectNear(const std::vector<float>& got, const std::vector<double>& want,
                double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i])))
        << what << " at " << i;
  }
}

TEST(CpuBackend, GemmMatchesFp64ReferenceForAllTransposes) {
  CpuBackend backend;
  const int m = 7, n = 5, k = 11;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (float beta : {0.0f, 0.5f}) {
        const std::vector<float> a = Random(m * k, 1);
        const std::vector<float> b = Random(k * n, 2);
        std::vector<float> c = Random(m * n, 3);
        std::vector<double> want(m * n);
        for (int i = 0; i < m; ++i) {
          for (int j = 0; j < n; ++j) {
            double sum = 0.0;
            for (int p = 0; p < k; ++p) {
              const double av = ta ? a[p * m + i] : a[i * k + p];
              const double bv = tb ? b[j * k + p] : b[p * n + j];
              sum += av * bv;
            }
            want[i * n + j] = 1.5 * sum + beta * double{c[i * n + j]};
          }
        }
        backend.Gemm(ta, tb, m, n, k, 1.5f, a.data(), b.data(), beta, c.data());
        ExpectNear(c, want, 1e-5, ta ? (tb ? "TT" : "TN") : (tb ? "NT" : "NN"));
      }
    }
  }
}

TEST(CpuBackend, GemmBetaZeroIgnoresNan) {
  CpuBackend backend;
  const std::vector<float> a = {1, 2}, b = {3, 4};
  std::vector<float> c = {NAN};
  backend.Gemm(false, false, 1, 1, 2, 1.0f, a.data(), b.data(), 0.0f, c.data());
  EXPECT_EQ(c[0], 11.0f);
}

TEST(CpuBackend, BiasAndRelu) {
  CpuBackend backend;
  std::vector<float> y(2 * 3 * 4, 1.0f);
  const std::vector<float> bias = {1, -2, 3};
  backend.AddBias(bias.data(), 2, 3, 4, y.data());
  for (int o = 0; o < 2; ++o) {
    for (int c = 0; c < 3; ++c) {
      for (int i = 0; i < 4; ++i)
        EXPECT_EQ(y[(o * 3 + c) * 4 + i], 1 + bias[c]);
    }
  }
  std::vector<float> db(3);
  backend.BiasGradient(y.data(), 2, 3, 4, db.data());
  EXPECT_EQ(db, (std::vector<float>{16, -8, 32}));

  std::vector<float> r(y.size()), dr(y.size());
  backend.ReluForward(y.data(), r.data(), y.size());
  backend.ReluBackward(r.data(), y.data(), dr.data(), y.size());
  for (size_t i = 0; i < y.size(); ++i) {
    EXPECT_EQ(r[i], std::max(0.0f, y[i]));
    EXPECT_EQ(dr[i], y[i] > 0 ? y[i] : 0.0f);
  }
}

// Direct convolution in fp64: y[n, o, i, j] = sum over c, ki, kj of
// w[o, c, ki, kj] * x[n, c, i + ki - p, j + kj - p] (zero outside).
std::vector<double> DirectConv(const Conv2dShape& s,
                               const std::vector<float>& x,
                               const std::vector<float>& w) {
  const int oh = s.out_height(), ow = s.out_width(), k = s.kernel;
  std::vector<double> y(s.output_elements(), 0.0);
  for (int n = 0; n < s.batch; ++n)
    for (int o = 0; o < s.out_channels; ++o)
      for (int i = 0; i < oh; ++i)
        for (int j = 0; j < ow; ++j) {
          double sum = 0.0;
          for (int c = 0; c < s.in_channels; ++c)
            for (int ki = 0; ki < k; ++ki)
              for (int kj = 0; kj < k; ++kj) {
                const int iy = i + ki - s.padding, ix = j + kj - s.padding;
                if (iy < 0 || iy >= s.height || ix < 0 || ix >= s.width) {
                  continue;
                }
                sum +=
                    double{w[((o * s.in_channels + c) * k + ki) * k + kj]} *
                    x[((n * s.in_channels + c) * s.height + iy) * s.width + ix];
              }
          y[((n * s.out_channels + o) * oh + i) * ow + j] = sum;
        }
  return y;
}

// (shape, max column floats): the default lowers the whole batch at once;
// small limits force chunks of one and two samples.
class ConvTest
    : public ::testing::TestWithParam<std::tuple<Conv2dShape, size_t>> {};

TEST_P(ConvTest, ForwardAndBackwardMatchDirectConvolution) {
  const Conv2dShape s = std::get<0>(GetParam());
  CpuBackend backend(std::get<1>(GetParam()));
  const std::vector<float> x = Random(s.input_elements(), 10);
  const std::vector<float> w = Random(s.filter_elements(), 11);
  const std::vector<float> dy = Random(s.output_elements(), 12);

  std::vector<float> y(s.output_elements());
  backend.Conv2dForward(s, x.data(), w.data(), y.data());
  ExpectNear(y, DirectConv(s, x, w), 1e-5, "forward");

  // The convolution is linear in x and in w: the gradient of
  // L = sum(dy * conv(x, w)) with respect to x[e] is L evaluated at x = unit
  // vector e (and likewise for w). Checked against the fp64 direct
  // convolution, one basis vector at a time.
  auto loss = [&](const std::vector<float>& xx, const std::vector<float>& ww) {
    const std::vector<double> yy = DirectConv(s, xx, ww);
    double l = 0.0;
    for (size_t i = 0; i < yy.size(); ++i) l += yy[i] * dy[i];
    return l;
  };
  std::vector<float> dx(s.input_elements());
  backend.Conv2dBackwardData(s, w.data(), dy.data(), dx.data());
  std::vector<double> want_dx(x.size());
  for (size_t e = 0; e < x.size(); ++e) {
    std::vector<float> unit(x.size(), 0.0f);
    unit[e] = 1.0f;
    want_dx[e] = loss(unit, w);
  }
  ExpectNear(dx, want_dx, 1e-5, "backward data");

  std::vector<float> dw(s.filter_elements());
  backend.Conv2dBackwardFilter(s, x.data(), dy.data(), dw.data());
  std::vector<double> want_dw(w.size());
  for (size_t e = 0; e < w.size(); ++e) {
    std::vector<float> unit(w.size(), 0.0f);
    unit[e] = 1.0f;
    want_dw[e] = loss(x, unit);
  }
  ExpectNear(dw, want_dw, 1e-5, "backward filter");
}

Conv2dShape Shape(int batch, int in_c, int h, int w, int out_c, int k,
                  int pad) {
  Conv2dShape s;
  s.batch = batch;
  s.in_channels = in_c;
  s.height = h;
  s.width = w;
  s.out_channels = out_c;
  s.kernel = k;
  s.padding = pad;
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ConvTest,
    ::testing::Combine(::testing::Values(Shape(2, 1, 6, 6, 3, 5, 2),
                                         Shape(2, 3, 7, 5, 2, 5, 2),
                                         Shape(1, 2, 5, 6, 3, 3, 0),
                                         Shape(3, 2, 4, 4, 2, 3, 1),
                                         Shape(3, 1, 2, 3, 1, 5, 2)),
                       ::testing::Values(CpuBackend::kDefaultMaxColumnFloats,
                                         size_t{1}, size_t{2 * 18 * 16})));

TEST(CpuBackend, MaxPoolForwardAndBackward) {
  CpuBackend backend;
  Pool2dShape s;
  s.batch = 2;
  s.channels = 3;
  s.height = 5;  // odd: the last row is ignored
  s.width = 4;
  const std::vector<float> x = Random(s.input_elements(), 20);
  const std::vector<float> dy = Random(s.output_elements(), 21);
  std::vector<float> y(s.output_elements()), dx(s.input_elements());
  backend.MaxPool2dForward(s, x.data(), y.data());
  backend.MaxPool2dBackward(s, x.data(), y.data(), dy.data(), dx.data());
  std::vector<float> want_dx(x.size(), 0.0f);
  for (int p = 0; p < s.batch * s.channels; ++p) {
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 2; ++j) {
        int best = -1;
        for (int di = 0; di < 2; ++di) {
          for (int dj = 0; dj < 2; ++dj) {
            const int at = (p * 5 + 2 * i + di) * 4 + 2 * j + dj;
            if (best < 0 || x[at] > x[best]) best = at;
          }
        }
        EXPECT_EQ(y[(p * 2 + i) * 2 + j], x[best]);
        want_dx[best] += dy[(p * 2 + i) * 2 + j];
      }
    }
  }
  EXPECT_EQ(dx, want_dx);
}

TEST(CpuBackend, SoftmaxCrossEntropyGradientMatchesFiniteDifferences) {
  CpuBackend backend;
  const int batch = 4, classes = 10;
  std::vector<float> logits = Random(batch * classes, 30);
  for (float& v : logits) v *= 3.0f;
  const std::vector<uint8_t> labels = {3, 0, 9, 3};
  std::vector<float> grad(logits.size());
  float loss = 0.0f;
  backend.SoftmaxCrossEntropy(logits.data(), labels.data(), batch, classes,
                              &loss, grad.data());
  // fp64 reference loss.
  auto ref = [&](const std::vector<double>& z) {
    double total = 0.0;
    for (int b = 0; b < batch; ++b) {
      double sum = 0.0;
      for (int c = 0; c < classes; ++c) sum += std::exp(z[b * classes + c]);
      total += std::log(sum) - z[b * classes + labels[b]];
    }
    return total / batch;
  };
  std::vector<double> z(logits.begin(), logits.end());
  EXPECT_NEAR(loss, ref(z), 1e-5);
  const double eps = 1e-4;
  for (size_t i = 0; i < z.size(); ++i) {
    std::vector<double> zp = z, zm = z;
    zp[i] += eps;
    zm[i] -= eps;
    EXPECT_NEAR(grad[i], (ref(zp) - ref(zm)) / (2 * eps), 1e-5) << i;
  }
  // Loss only, gradient pointer null.
  float loss_only = 0.0f;
  backend.SoftmaxCrossEntropy(logits.data(), labels.data(), batch, classes,
                              &loss_only, nullptr);
  EXPECT_EQ(loss_only, loss);
}

TEST(CpuBackend, CountCorrectTakesFirstMaximum) {
  CpuBackend backend;
  const std::vector<float> logits = {0, 5, 5,   // argmax 1
                                     9, 1, 2,   // 0
                                     1, 1, 3};  // 2
  const std::vector<uint8_t> labels = {1, 1, 2};
  int32_t correct = -1;
  backend.CountCorrect(logits.data(), labels.data(), 3, 3, &correct);
  EXPECT_EQ(correct, 2);
}

TEST(CpuBackend, MemoryRoundTrip) {
  CpuBackend backend;
  absl::StatusOr<void*> p = backend.Allocate(10 * sizeof(float));
  ASSERT_TRUE(p.ok()) << p.status();
  const std::vector<float> in = Random(10, 40);
  std::vector<float> out(10);
  ASSERT_TRUE(backend.CopyIn(*p, in.data(), 40).ok());
  ASSERT_TRUE(backend.CopyOut(out.data(), *p, 40).ok());
  EXPECT_EQ(in, out);
  backend.Zero(static_cast<float*>(*p), 10);
  ASSERT_TRUE(backend.CopyOut(out.data(), *p, 40).ok());
  EXPECT_EQ(out, std::vector<float>(10, 0.0f));
  backend.Free(*p);
  EXPECT_TRUE(backend.Synchronize().ok());
}

TEST(CreateBackend, CpuWorksGpuSaysHowToBuildUnknownIsRejected) {
  absl::StatusOr<std::unique_ptr<Backend>> cpu = CreateBackend("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ((*cpu)->name(), "cpu");
#ifndef STARLING_TRAIN_WITH_GPU
  absl::StatusOr<std::unique_ptr<Backend>> gpu = CreateBackend("gpu");
  EXPECT_EQ(gpu.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(gpu.status().message().find("--config=cuda"), std::string::npos);
#endif
  EXPECT_EQ(CreateBackend("tpu").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace train
}  // namespace starling
