// IDX reader: the file format of MNIST and Fashion-MNIST
// (http://yann.lecun.com/exdb/mnist/, "FILE FORMATS"). A file is a 4-byte
// magic, 0x00 0x00 <type> <number of dimensions>, then each dimension as a
// big-endian uint32, then the data, row-major. Only type 0x08 (unsigned
// byte) is read: images are magic 0x00000803 [count, rows, cols], labels
// 0x00000801 [count]. Files may be gzip-compressed (.gz, read with zlib) or
// plain; zlib tells them apart by content, not by name. Bytes after the
// data the header describes are ignored.
//
// Errors name the file and say what is wrong:
//   NotFound          the file does not exist
//   PermissionDenied  it cannot be opened for reading
//   InvalidArgument   not an IDX file of the expected kind (wrong magic),
//                     zero-sized dimensions, a label value out of range
//   DataLoss          truncated data, corrupt gzip stream
//
// Thread safety: the functions are thread-safe (no shared state).
#ifndef STARLING_WORKER_TRAIN_IDX_H_
#define STARLING_WORKER_TRAIN_IDX_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace starling {
namespace train {

inline constexpr uint32_t kIdxImagesMagic = 0x00000803;
inline constexpr uint32_t kIdxLabelsMagic = 0x00000801;

// Images as stored: `count` images of rows x cols pixels, row-major, one byte
// each (0 = background), pixels.size() == count * rows * cols.
struct IdxImages {
  int64_t count = 0;
  int rows = 0;
  int cols = 0;
  std::vector<uint8_t> pixels;
};

// Reads an image file (magic 0x00000803). With max_count, reads only the
// first min(count, max_count) images (the rest of the file is neither read
// nor checked); `count` is then that number.
absl::StatusOr<IdxImages> ReadIdxImages(
    const std::string& path,
    int64_t max_count = std::numeric_limits<int64_t>::max());

// Reads a label file (magic 0x00000801); every label must be < num_classes
// (InvalidArgument naming the index and value otherwise). max_count as for
// ReadIdxImages.
absl::StatusOr<std::vector<uint8_t>> ReadIdxLabels(
    const std::string& path, int num_classes = 10,
    int64_t max_count = std::numeric_limits<int64_t>::max());

// Where Debian's dataset-fashion-mnist package installs the files.
inline constexpr absl::string_view kDefaultFashionMnistDir =
    "/usr/share/datasets/fashion-mnist";

}  // namespace train
}  // namespace starling

#endif  // STARLING_WORKER_TRAIN_IDX_H_
