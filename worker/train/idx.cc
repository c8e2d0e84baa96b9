// IDX reading through zlib's gzFile, which reads gzip and plain files alike
// (gzopen falls back to a transparent read when there is no gzip header).
// Errors are told apart as follows: gzread returning -1 is a gzip error
// (gzerror's Z_DATA_ERROR / Z_BUF_ERROR: corrupt or cut-off stream);
// gzread returning fewer bytes than asked is a short file, reported with
// what the header promised and what the file held.
#include "worker/train/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace starling {
namespace train {
namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

absl::StatusOr<GzFile> Open(const std::string& path) {
  errno = 0;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f != nullptr) return GzFile(f);
  const int err = errno;
  if (err == ENOENT) {
    return absl::NotFoundError(absl::StrCat(
        path,
        ": no such file; Debian's package dataset-fashion-mnist puts the "
        "Fashion-MNIST files in ",
        kDefaultFashionMnistDir, "/ and deploy/setup.sh installs it"));
  }
  if (err == EACCES) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot open for reading: ", std::strerror(err)));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": cannot open: ", err != 0 ? std::strerror(err) : "zlib error"));
}

// gzerror's message, without the "<path>: " prefix zlib puts on it.
std::string GzMessage(gzFile f, const std::string& path) {
  int errnum = 0;
  const char* msg = gzerror(f, &errnum);
  absl::string_view text = msg != nullptr ? msg : "unknown zlib error";
  const std::string prefix = path + ": ";
  if (absl::StartsWith(text, prefix)) text.remove_prefix(prefix.size());
  return std::string(text);
}

// Reads up to `bytes` bytes; returns how many were read (< bytes at the end
// of the data) or DataLoss for a gzip error.
absl::StatusOr<size_t> Read(gzFile f, const std::string& path, void* dst,
                            size_t bytes) {
  size_t done = 0;
  char* out = static_cast<char*>(dst);
  while (done < bytes) {
    // gzread takes an unsigned int count; read in 1 GiB pieces.
    const unsigned chunk =
        static_cast<unsigned>(std::min<size_t>(bytes - done, 1u << 30));
    const int n = gzread(f, out + done, chunk);
    if (n < 0) {
      return absl::DataLossError(
          absl::StrCat(path, ": corrupt gzip data (", GzMessage(f, path), ")"));
    }
    if (n == 0) {
      // A gzip stream cut off mid-way may only show as an error state at
      // end of input.
      int errnum = 0;
      gzerror(f, &errnum);
      if (errnum != Z_OK && errnum != Z_STREAM_END) {
        return absl::DataLossError(
            absl::StrCat(path, ": corrupt or truncated gzip data (",
                         GzMessage(f, path), ")"));
      }
      break;
    }
    done += static_cast<size_t>(n);
  }
  return done;
}

std::string Hex(uint32_t v) { return absl::StrFormat("0x%08x", v); }

// Reads the magic and dimensions; checks the magic is `expected`.
absl::StatusOr<std::vector<uint32_t>> ReadHeader(gzFile f,
                                                 const std::string& path,
                                                 uint32_t expected,
                                                 absl::string_view what) {
  unsigned char magic[4];
  absl::StatusOr<size_t> n = Read(f, path, magic, 4);
  if (!n.ok()) return n.status();
  const uint32_t found = (uint32_t{magic[0]} << 24) |
                         (uint32_t{magic[1]} << 16) |
                         (uint32_t{magic[2]} << 8) | magic[3];
  if (*n < 4 || found != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not an IDX ", what, " file: expected magic ", Hex(expected),
        " (", what, ": unsigned bytes, ", expected & 0xff, " dimensions), ",
        *n < 4 ? absl::StrCat("the file holds only ", *n, " bytes")
               : absl::StrCat("found ", Hex(found)),
        "; IDX magics are ", Hex(kIdxImagesMagic), " for images and ",
        Hex(kIdxLabelsMagic), " for labels"));
  }
  const int ndims = magic[3];
  std::vector<unsigned char> raw(4 * ndims);
  n = Read(f, path, raw.data(), raw.size());
  if (!n.ok()) return n.status();
  if (*n < raw.size()) {
    return absl::DataLossError(absl::StrCat(
        path, ": truncated header: ", ndims, " dimensions need ", raw.size(),
        " bytes after the magic, the file holds ", *n));
  }
  std::vector<uint32_t> dims(ndims);
  for (int i = 0; i < ndims; ++i) {
    dims[i] = (uint32_t{raw[4 * i]} << 24) | (uint32_t{raw[4 * i + 1]} << 16) |
              (uint32_t{raw[4 * i + 2]} << 8) | raw[4 * i + 3];
  }
  return dims;
}

}  // namespace

absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path,
                                        int64_t max_count) {
  absl::StatusOr<GzFile> f = Open(path);
  if (!f.ok()) return f.status();
  absl::StatusOr<std::vector<uint32_t>> dims =
      ReadHeader(f->get(), path, kIdxImagesMagic, "images");
  if (!dims.ok()) return dims.status();
  const uint32_t count = (*dims)[0], rows = (*dims)[1], cols = (*dims)[2];
  if (rows == 0 || cols == 0 || rows > 65536 || cols > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": header says images of ", rows, "x", cols,
                     "; expected each side in 1..65536"));
  }
  IdxImages images;
  images.count = std::min<int64_t>(count, std::max<int64_t>(max_count, 0));
  images.rows = static_cast<int>(rows);
  images.cols = static_cast<int>(cols);
  const size_t want = static_cast<size_t>(images.count) * rows * cols;
  images.pixels.resize(want);
  absl::StatusOr<size_t> n = Read(f->get(), path, images.pixels.data(), want);
  if (!n.ok()) return n.status();
  if (*n < want) {
    return absl::DataLossError(
        absl::StrCat(path, ": truncated: header says ", count, " images of ",
                     rows, "x", cols,
                     images.count < count
                         ? absl::StrCat(", reading the first ", images.count)
                         : "",
                     " = ", want, " bytes, the file holds ", *n));
  }
  return images;
}

absl::StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path,
                                                   int num_classes,
                                                   int64_t max_count) {
  absl::StatusOr<GzFile> f = Open(path);
  if (!f.ok()) return f.status();
  absl::StatusOr<std::vector<uint32_t>> dims =
      ReadHeader(f->get(), path, kIdxLabelsMagic, "labels");
  if (!dims.ok()) return dims.status();
  const uint32_t count = (*dims)[0];
  const size_t want = static_cast<size_t>(
      std::min<int64_t>(count, std::max<int64_t>(max_count, 0)));
  std::vector<uint8_t> labels(want);
  absl::StatusOr<size_t> n = Read(f->get(), path, labels.data(), want);
  if (!n.ok()) return n.status();
  if (*n < want) {
    return absl::DataLossError(absl::StrCat(
        path, ": truncated: header says ", count, " labels",
        want < count ? absl::StrCat(", reading the first ", want) : "", " = ",
        want, " bytes, the file holds ", *n));
  }
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= num_classes) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": label ", i, " is ", static_cast<int>(labels[i]),
                       "; expected 0..", num_classes - 1));
    }
  }
  return labels;
}

}  // namespace train
}  // namespace starling
