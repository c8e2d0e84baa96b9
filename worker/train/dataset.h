// Dataset: Fashion-MNIST in memory, normalised for training, plus the
// deterministic epoch order and the partition of an epoch into batches.
//
// Images are float32 [N, 1, 28, 28] with each pixel x (0..255) stored as
// (x / 255 - kFashionMnistMean) / kFashionMnistStd; labels are uint8 0..9.
// An epoch visits the samples in EpochOrder(seed, epoch, n); partition p of
// the epoch (a batch, pushed as one step) is order[p * B, min((p+1) * B, n)).
//
// Thread safety: a Dataset is immutable after loading and thread-safe to read.
#ifndef STARLING_WORKER_TRAIN_DATASET_H_
#define STARLING_WORKER_TRAIN_DATASET_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "worker/train/idx.h"

namespace starling {
namespace train {

// Mean and standard deviation of Fashion-MNIST's pixels scaled to [0, 1],
// computed over the 60000 training images (47,040,000 pixels): 0.2860 and
// 0.3530 (the values torchvision users quote for Fashion-MNIST).
inline constexpr float kFashionMnistMean = 0.2860f;
inline constexpr float kFashionMnistStd = 0.3530f;

inline constexpr int kImageChannels = 1;
inline constexpr int kImageSide = 28;
inline constexpr int kImageElements = kImageChannels * kImageSide * kImageSide;
inline constexpr int kNumClasses = 10;

class Dataset {
 public:
  Dataset() = default;
  // From raw pixels [n, 28, 28] (0..255) and labels [n] (0..9); normalises.
  // REQUIRES: pixels.size() == labels.size() * 784.
  Dataset(absl::Span<const uint8_t> pixels, std::vector<uint8_t> labels);

  Dataset(Dataset&&) = default;
  Dataset& operator=(Dataset&&) = default;
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  int64_t size() const { return static_cast<int64_t>(labels_.size()); }
  // Sample i's normalised image, 784 floats. REQUIRES: 0 <= i < size().
  const float* image(int64_t i) const {
    return images_.data() + static_cast<size_t>(i) * kImageElements;
  }
  uint8_t label(int64_t i) const { return labels_[static_cast<size_t>(i)]; }
  absl::Span<const float> images() const { return images_; }
  absl::Span<const uint8_t> labels() const { return labels_; }

  // Copies samples indices[0..k) into x [k, 1, 28, 28] and y [k].
  // REQUIRES: each index in [0, size()); x, y hold k samples.
  void Gather(absl::Span<const int64_t> indices, float* x, uint8_t* y) const;

 private:
  std::vector<float> images_;
  std::vector<uint8_t> labels_;
};

// The raw files of a split ("train" or "test", from `dir`, the
// Debian package's names): pixels 0..255 and labels 0..9, the first
// min(limit, size) samples. Errors: InvalidArgument for another split name
// or image and label files of different counts; the idx.h errors otherwise.
struct RawSplit {
  IdxImages images;
  std::vector<uint8_t> labels;
  std::string image_path;  // for messages
};
absl::StatusOr<RawSplit> ReadFashionMnistSplit(
    absl::string_view dir, absl::string_view split,
    int64_t limit = std::numeric_limits<int64_t>::max());

// Loads split "train" (60000 samples: train-images-idx3-ubyte.gz,
// train-labels-idx1-ubyte.gz) or "test" (10000: t10k-images-idx3-ubyte.gz,
// t10k-labels-idx1-ubyte.gz) from `dir`; with `limit`, only the first
// min(limit, size) samples. Errors: InvalidArgument for another split name,
// images that are not 28x28 or image and label files of different counts;
// the idx.h errors otherwise (NotFound names the Debian package).
absl::StatusOr<Dataset> LoadFashionMnist(
    absl::string_view dir, absl::string_view split,
    int64_t limit = std::numeric_limits<int64_t>::max());

// A permutation of 0..n-1, the same for the same (seed, epoch, n) on every
// platform and standard library: Fisher-Yates driven by std::mt19937_64's
// raw output (fully specified by the C++ standard), seeded from a SplitMix64
// mix of seed and epoch.
std::vector<int64_t> EpochOrder(uint64_t seed, int64_t epoch, int64_t n);

// Number of partitions of an epoch of n samples in batches of batch_size
// (the last may be smaller): ceil(n / batch_size). REQUIRES: batch_size > 0.
int64_t NumPartitions(int64_t n, int batch_size);

// Partition p of an epoch: order[p * B, min((p + 1) * B, n)); empty when p is
// past the end. A view into `order`. REQUIRES: batch_size > 0, p >= 0.
absl::Span<const int64_t> PartitionSamples(absl::Span<const int64_t> order,
                                           int64_t partition, int batch_size);

}  // namespace train
}  // namespace starling

#endif  // STARLING_WORKER_TRAIN_DATASET_H_
