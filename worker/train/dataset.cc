// Dataset loading and the epoch order.
//
// EpochOrder's Fisher-Yates: for i = n-1 down to 1, swap order[i] with
// order[j], j uniform in [0, i]. j is drawn from 64-bit generator output by
// rejection (values at or above the largest multiple of i + 1 are redrawn),
// so it is exactly uniform and depends on nothing a standard library may
// choose (std::uniform_int_distribution's algorithm is unspecified).
#include "worker/train/dataset.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace starling {
namespace train {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [0, bound) from raw 64-bit output. REQUIRES: bound > 0.
uint64_t Below(std::mt19937_64& gen, uint64_t bound) {
  // Largest multiple of bound that fits: accept r < limit.
  const uint64_t limit = UINT64_MAX - (UINT64_MAX % bound + 1) % bound;
  uint64_t r;
  do {
    r = gen();
  } while (r > limit);
  return r % bound;
}

}  // namespace

Dataset::Dataset(absl::Span<const uint8_t> pixels, std::vector<uint8_t> labels)
    : images_(pixels.size()), labels_(std::move(labels)) {
  // (x / 255 - mean) / std = x * scale + shift.
  const float scale = 1.0f / (255.0f * kFashionMnistStd);
  const float shift = -kFashionMnistMean / kFashionMnistStd;
  for (size_t i = 0; i < pixels.size(); ++i) {
    images_[i] = static_cast<float>(pixels[i]) * scale + shift;
  }
}

void Dataset::Gather(absl::Span<const int64_t> indices, float* x,
                     uint8_t* y) const {
  for (size_t k = 0; k < indices.size(); ++k) {
    std::copy_n(image(indices[k]), kImageElements, x + k * kImageElements);
    y[k] = label(indices[k]);
  }
}

absl::StatusOr<RawSplit> ReadFashionMnistSplit(absl::string_view dir,
                                               absl::string_view split,
                                               int64_t limit) {
  std::string prefix;
  if (split == "train") {
    prefix = "train";
  } else if (split == "test") {
    prefix = "t10k";
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown Fashion-MNIST split \"", split,
                     "\"; expected \"train\" or \"test\""));
  }
  const std::string image_path =
      absl::StrCat(dir, "/", prefix, "-images-idx3-ubyte.gz");
  const std::string label_path =
      absl::StrCat(dir, "/", prefix, "-labels-idx1-ubyte.gz");
  RawSplit raw;
  raw.image_path = image_path;
  absl::StatusOr<IdxImages> images = ReadIdxImages(image_path, limit);
  if (!images.ok()) return images.status();
  raw.images = *std::move(images);
  absl::StatusOr<std::vector<uint8_t>> labels =
      ReadIdxLabels(label_path, kNumClasses, limit);
  if (!labels.ok()) return labels.status();
  raw.labels = *std::move(labels);
  if (static_cast<int64_t>(raw.labels.size()) != raw.images.count) {
    return absl::InvalidArgumentError(absl::StrCat(
        image_path, " holds ", raw.images.count, " images but ", label_path,
        " holds ", raw.labels.size(), " labels (reading at most ",
        limit == std::numeric_limits<int64_t>::max() ? std::string("all")
                                                     : absl::StrCat(limit),
        ")"));
  }
  return raw;
}

absl::StatusOr<Dataset> LoadFashionMnist(absl::string_view dir,
                                         absl::string_view split,
                                         int64_t limit) {
  absl::StatusOr<RawSplit> raw = ReadFashionMnistSplit(dir, split, limit);
  if (!raw.ok()) return raw.status();
  if (raw->images.rows != kImageSide || raw->images.cols != kImageSide) {
    return absl::InvalidArgumentError(
        absl::StrCat(raw->image_path, ": images are ", raw->images.rows, "x",
                     raw->images.cols, "; Fashion-MNIST's are 28x28"));
  }
  return Dataset(raw->images.pixels, std::move(raw->labels));
}

std::vector<int64_t> EpochOrder(uint64_t seed, int64_t epoch, int64_t n) {
  std::vector<int64_t> order(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::mt19937_64 gen(
      SplitMix64(SplitMix64(seed) ^ static_cast<uint64_t>(epoch)));
  for (size_t i = order.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(Below(gen, i));
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

int64_t NumPartitions(int64_t n, int batch_size) {
  return (n + batch_size - 1) / batch_size;
}

absl::Span<const int64_t> PartitionSamples(absl::Span<const int64_t> order,
                                           int64_t partition, int batch_size) {
  const int64_t n = static_cast<int64_t>(order.size());
  const int64_t begin = std::min(n, partition * batch_size);
  const int64_t end = std::min(n, begin + batch_size);
  return order.subspan(static_cast<size_t>(begin),
                       static_cast<size_t>(end - begin));
}

}  // namespace train
}  // namespace starling
