// CpuBackend. Convolution as im2col + GEMM over a chunk of samples
// n0 .. n0 + c - 1 at a time. With K = in_c * k * k and P = oh * ow:
//   columns [K, c * P]: row (ci, ki, kj), column (j, oy, ox) holds
//   x[n0 + j, ci, oy + ki - pad, ox + kj - pad], or 0 in the padding.
//   packed [out_c, c * P]: y (or dy) of the chunk with the sample index moved
//   inside the channel index, the layout a single GEMM produces / consumes.
// With W viewed as [out_c, K]:
//   forward         packed = W * columns, then unpacked into y [c, out_c, P]
//   backward data   dcol [K, c * P] = W^T * packed(dy), then col2im adds each
//                   dcol entry back to the x position it was read from
//   backward filter dW (+)= packed(dy) * columns^T, accumulated over chunks
// The loops here only move data; every multiply-add of the layers runs in
// cblas_sgemm.
#include "worker/train/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>

#include "absl/strings/str_cat.h"

namespace starling {
namespace train {
namespace {

// x: one sample [c, h, w]; cols: [c * k * k, oh * ow] with row stride ld.
void Im2Col(const Conv2dShape& s, const float* x, float* cols, size_t ld) {
  const int oh = s.out_height(), ow = s.out_width();
  const int k = s.kernel, pad = s.padding;
  for (int c = 0; c < s.in_channels; ++c) {
    const float* xc = x + static_cast<size_t>(c) * s.height * s.width;
    for (int ki = 0; ki < k; ++ki) {
      for (int kj = 0; kj < k; ++kj) {
        float* row = cols + (static_cast<size_t>(c) * k * k + ki * k + kj) * ld;
        for (int oy = 0; oy < oh; ++oy) {
          const int iy = oy + ki - pad;
          float* out = row + static_cast<size_t>(oy) * ow;
          if (iy < 0 || iy >= s.height) {
            std::memset(out, 0, sizeof(float) * ow);
            continue;
          }
          const float* in = xc + static_cast<size_t>(iy) * s.width;
          // ox range whose ix = ox + kj - pad lies inside [0, width).
          const int lo = std::min(ow, std::max(0, pad - kj));
          const int hi = std::max(lo, std::min(ow, s.width + pad - kj));
          for (int ox = 0; ox < lo; ++ox) out[ox] = 0.0f;
          for (int ox = lo; ox < hi; ++ox) out[ox] = in[ox + kj - pad];
          for (int ox = hi; ox < ow; ++ox) out[ox] = 0.0f;
        }
      }
    }
  }
}

// Adds cols [c * k * k, oh * ow] (row stride ld) back into one sample
// x [c, h, w] (which the caller zeroed).
void Col2Im(const Conv2dShape& s, const float* cols, size_t ld, float* x) {
  const int oh = s.out_height(), ow = s.out_width();
  const int k = s.kernel, pad = s.padding;
  for (int c = 0; c < s.in_channels; ++c) {
    float* xc = x + static_cast<size_t>(c) * s.height * s.width;
    for (int ki = 0; ki < k; ++ki) {
      for (int kj = 0; kj < k; ++kj) {
        const float* row =
            cols + (static_cast<size_t>(c) * k * k + ki * k + kj) * ld;
        for (int oy = 0; oy < oh; ++oy) {
          const int iy = oy + ki - pad;
          if (iy < 0 || iy >= s.height) continue;
          const float* in = row + static_cast<size_t>(oy) * ow;
          float* out = xc + static_cast<size_t>(iy) * s.width;
          const int lo = std::max(0, pad - kj);
          const int hi = std::min(ow, s.width + pad - kj);
          for (int ox = lo; ox < hi; ++ox) out[ox + kj - pad] += in[ox];
        }
      }
    }
  }
}

// Copies dy of samples n0 .. n0 + c - 1 into packed [out_c, c * P].
void PackOutputGradient(const Conv2dShape& s, const float* dy, int n0, int c,
                        size_t p, float* packed) {
  const size_t ld = c * p;
  for (int j = 0; j < c; ++j) {
    for (int o = 0; o < s.out_channels; ++o) {
      std::memcpy(packed + o * ld + j * p,
                  dy + ((static_cast<size_t>(n0) + j) * s.out_channels + o) * p,
                  p * sizeof(float));
    }
  }
}

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend() {
  return std::make_unique<CpuBackend>();
}

absl::StatusOr<void*> CpuBackend::Allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  // 64-byte alignment suits AVX-512 loads in OpenBLAS.
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cpu backend: cannot allocate ", bytes, " bytes"));
  }
  return p;
}

void CpuBackend::Free(void* ptr) { std::free(ptr); }

absl::Status CpuBackend::CopyIn(void* dst, const void* host_src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, host_src, bytes);
  return absl::OkStatus();
}

absl::Status CpuBackend::CopyOut(void* host_dst, const void* src,
                                 size_t bytes) {
  if (bytes > 0) std::memcpy(host_dst, src, bytes);
  return absl::OkStatus();
}

void CpuBackend::Zero(float* x, size_t n) {
  if (n > 0) std::memset(x, 0, n * sizeof(float));
}

void CpuBackend::Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                      float alpha, const float* a, const float* b, float beta,
                      float* c) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    // cblas_sgemm with k == 0 is allowed but some builds read A/B anyway;
    // do the scaling here. beta == 0 must not propagate NaN.
    for (size_t i = 0; i < static_cast<size_t>(m) * n; ++i) {
      c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a,
              trans_a ? m : k, b, trans_b ? k : n, beta, c, n);
}

void CpuBackend::AddBias(const float* bias, int outer, int channels, int inner,
                         float* y) {
  for (int o = 0; o < outer; ++o) {
    for (int c = 0; c < channels; ++c) {
      float* row = y + (static_cast<size_t>(o) * channels + c) * inner;
      const float v = bias[c];
      for (int i = 0; i < inner; ++i) row[i] += v;
    }
  }
}

void CpuBackend::BiasGradient(const float* dy, int outer, int channels,
                              int inner, float* db) {
  for (int c = 0; c < channels; ++c) db[c] = 0.0f;
  for (int o = 0; o < outer; ++o) {
    for (int c = 0; c < channels; ++c) {
      const float* row = dy + (static_cast<size_t>(o) * channels + c) * inner;
      float sum = 0.0f;
      for (int i = 0; i < inner; ++i) sum += row[i];
      db[c] += sum;
    }
  }
}

void CpuBackend::ReluForward(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void CpuBackend::ReluBackward(const float* y, const float* dy, float* dx,
                              size_t n) {
  for (size_t i = 0; i < n; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

float* CpuBackend::Columns(size_t elements) {
  if (columns_.size() < elements) columns_.resize(elements);
  return columns_.data();
}

float* CpuBackend::Packed(size_t elements) {
  if (packed_.size() < elements) packed_.resize(elements);
  return packed_.data();
}

int CpuBackend::ChunkSamples(const Conv2dShape& s) const {
  const size_t per_sample = static_cast<size_t>(s.in_channels) * s.kernel *
                            s.kernel * s.out_height() * s.out_width();
  const size_t fit = per_sample == 0 ? 1 : max_column_floats_ / per_sample;
  return static_cast<int>(
      std::max<size_t>(1, std::min<size_t>(fit, std::max(s.batch, 1))));
}

CpuBackend::ConvWork CpuBackend::Work(const Conv2dShape& s) {
  ConvWork work;
  work.kk = s.in_channels * s.kernel * s.kernel;
  work.p = static_cast<size_t>(s.out_height()) * s.out_width();
  work.chunk = ChunkSamples(s);
  work.cols = Columns(static_cast<size_t>(work.kk) * work.chunk * work.p);
  work.packed =
      Packed(static_cast<size_t>(s.out_channels) * work.chunk * work.p);
  work.x_stride = static_cast<size_t>(s.in_channels) * s.height * s.width;
  return work;
}

void CpuBackend::Conv2dForward(const Conv2dShape& s, const float* x,
                               const float* w, float* y) {
  const ConvWork work = Work(s);
  const int kk = work.kk, chunk = work.chunk;
  const size_t p = work.p, x_stride = work.x_stride;
  float* cols = work.cols;
  float* packed = work.packed;
  for (int n0 = 0; n0 < s.batch; n0 += chunk) {
    const int c = std::min(chunk, s.batch - n0);
    const size_t ld = c * p;
    for (int j = 0; j < c; ++j)
      Im2Col(s, x + (n0 + j) * x_stride, cols + j * p, ld);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.out_channels,
                static_cast<int>(ld), kk, 1.0f, w, kk, cols,
                static_cast<int>(ld), 0.0f, packed, static_cast<int>(ld));
    for (int j = 0; j < c; ++j) {
      for (int o = 0; o < s.out_channels; ++o) {
        std::memcpy(
            y + ((static_cast<size_t>(n0) + j) * s.out_channels + o) * p,
            packed + o * ld + j * p, p * sizeof(float));
      }
    }
  }
}

void CpuBackend::Conv2dBackwardData(const Conv2dShape& s, const float* w,
                                    const float* dy, float* dx) {
  const ConvWork work = Work(s);
  const int kk = work.kk, chunk = work.chunk;
  const size_t p = work.p, x_stride = work.x_stride;
  float* cols = work.cols;
  float* packed = work.packed;
  Zero(dx, s.input_elements());
  for (int n0 = 0; n0 < s.batch; n0 += chunk) {
    const int c = std::min(chunk, s.batch - n0);
    const size_t ld = c * p;
    PackOutputGradient(s, dy, n0, c, p, packed);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kk,
                static_cast<int>(ld), s.out_channels, 1.0f, w, kk, packed,
                static_cast<int>(ld), 0.0f, cols, static_cast<int>(ld));
    for (int j = 0; j < c; ++j)
      Col2Im(s, cols + j * p, ld, dx + (n0 + j) * x_stride);
  }
}

void CpuBackend::Conv2dBackwardFilter(const Conv2dShape& s, const float* x,
                                      const float* dy, float* dw) {
  const ConvWork work = Work(s);
  const int kk = work.kk, chunk = work.chunk;
  const size_t p = work.p, x_stride = work.x_stride;
  float* cols = work.cols;
  float* packed = work.packed;
  if (s.batch == 0) Zero(dw, s.filter_elements());
  for (int n0 = 0; n0 < s.batch; n0 += chunk) {
    const int c = std::min(chunk, s.batch - n0);
    const size_t ld = c * p;
    for (int j = 0; j < c; ++j)
      Im2Col(s, x + (n0 + j) * x_stride, cols + j * p, ld);
    PackOutputGradient(s, dy, n0, c, p, packed);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.out_channels, kk,
                static_cast<int>(ld), 1.0f, packed, static_cast<int>(ld), cols,
                static_cast<int>(ld), n0 == 0 ? 0.0f : 1.0f, dw, kk);
  }
}

void CpuBackend::MaxPool2dForward(const Pool2dShape& s, const float* x,
                                  float* y) {
  const int oh = s.out_height(), ow = s.out_width();
  for (size_t plane = 0; plane < static_cast<size_t>(s.batch) * s.channels;
       ++plane) {
    const float* xp = x + plane * s.height * s.width;
    float* yp = y + plane * oh * ow;
    for (int i = 0; i < oh; ++i) {
      const float* r0 = xp + static_cast<size_t>(2 * i) * s.width;
      const float* r1 = r0 + s.width;
      for (int j = 0; j < ow; ++j) {
        yp[i * ow + j] = std::max(std::max(r0[2 * j], r0[2 * j + 1]),
                                  std::max(r1[2 * j], r1[2 * j + 1]));
      }
    }
  }
}

void CpuBackend::MaxPool2dBackward(const Pool2dShape& s, const float* x,
                                   const float* y, const float* dy, float* dx) {
  const int oh = s.out_height(), ow = s.out_width();
  Zero(dx, s.input_elements());
  for (size_t plane = 0; plane < static_cast<size_t>(s.batch) * s.channels;
       ++plane) {
    const float* xp = x + plane * s.height * s.width;
    float* dxp = dx + plane * s.height * s.width;
    const float* yp = y + plane * oh * ow;
    const float* dyp = dy + plane * oh * ow;
    for (int i = 0; i < oh; ++i) {
      for (int j = 0; j < ow; ++j) {
        const float m = yp[i * ow + j];
        // The first position in row-major order holding the maximum.
        size_t at = static_cast<size_t>(2 * i) * s.width + 2 * j;
        if (xp[at] != m) {
          if (xp[at + 1] == m) {
            at += 1;
          } else if (xp[at + s.width] == m) {
            at += s.width;
          } else {
            at += s.width + 1;
          }
        }
        dxp[at] += dyp[i * ow + j];
      }
    }
  }
}

void CpuBackend::SoftmaxCrossEntropy(const float* logits, const uint8_t* labels,
                                     int batch, int classes, float* loss,
                                     float* grad_logits) {
  double total = 0.0;
  const float inv_batch = 1.0f / static_cast<float>(batch);
  for (int b = 0; b < batch; ++b) {
    const float* z = logits + static_cast<size_t>(b) * classes;
    float max = z[0];
    for (int c = 1; c < classes; ++c) max = std::max(max, z[c]);
    double sum = 0.0;
    for (int c = 0; c < classes; ++c) sum += std::exp(double{z[c]} - max);
    const double log_sum = std::log(sum);
    total += log_sum - (double{z[labels[b]]} - max);
    if (grad_logits != nullptr) {
      float* g = grad_logits + static_cast<size_t>(b) * classes;
      for (int c = 0; c < classes; ++c) {
        const float p =
            static_cast<float>(std::exp(double{z[c]} - max - log_sum));
        g[c] = (p - (c == labels[b] ? 1.0f : 0.0f)) * inv_batch;
      }
    }
  }
  loss[0] = static_cast<float>(total / batch);
}

void CpuBackend::CountCorrect(const float* logits, const uint8_t* labels,
                              int batch, int classes, int32_t* correct) {
  int32_t count = 0;
  for (int b = 0; b < batch; ++b) {
    const float* z = logits + static_cast<size_t>(b) * classes;
    int best = 0;
    for (int c = 1; c < classes; ++c) {
      if (z[c] > z[best]) best = c;
    }
    if (best == labels[b]) ++count;
  }
  correct[0] = count;
}

}  // namespace train
}  // namespace starling
