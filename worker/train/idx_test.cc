#include "worker/train/idx.h"

#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace starling {
namespace train {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::vector<uint8_t> Header(uint32_t magic, const std::vector<uint32_t>& dims) {
  std::vector<uint8_t> out;
  auto put = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back((v >> s) & 0xff);
  };
  put(magic);
  for (uint32_t d : dims) put(d);
  return out;
}

// An images file: count images of rows x cols, pixel i = (i * 37) & 0xff.
std::vector<uint8_t> ImagesFile(uint32_t count, uint32_t rows, uint32_t cols) {
  std::vector<uint8_t> out = Header(kIdxImagesMagic, {count, rows, cols});
  for (uint32_t i = 0; i < count * rows * cols; ++i) {
    out.push_back(static_cast<uint8_t>((i * 37) & 0xff));
  }
  return out;
}

std::vector<uint8_t> LabelsFile(const std::vector<uint8_t>& labels) {
  std::vector<uint8_t> out =
      Header(kIdxLabelsMagic, {static_cast<uint32_t>(labels.size())});
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

std::string WritePlain(const std::string& name,
                       const std::vector<uint8_t>& bytes) {
  const std::string path = TempPath(name);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return path;
}

std::string WriteGz(const std::string& name,
                    const std::vector<uint8_t>& bytes) {
  const std::string path = TempPath(name);
  gzFile f = gzopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr);
  EXPECT_EQ(gzwrite(f, bytes.data(), bytes.size()),
            static_cast<int>(bytes.size()));
  gzclose(f);
  return path;
}

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

TEST(Idx, ReadsPlainAndGzipImages) {
  const std::vector<uint8_t> file = ImagesFile(3, 4, 5);
  for (const std::string& path :
       {WritePlain("plain-images", file), WriteGz("gz-images.gz", file)}) {
    absl::StatusOr<IdxImages> images = ReadIdxImages(path);
    ASSERT_TRUE(images.ok()) << images.status();
    EXPECT_EQ(images->count, 3);
    EXPECT_EQ(images->rows, 4);
    EXPECT_EQ(images->cols, 5);
    EXPECT_EQ(images->pixels,
              std::vector<uint8_t>(file.begin() + 16, file.end()));
  }
}

TEST(Idx, GzipLabelsRoundTrip) {
  const std::vector<uint8_t> labels = {0, 9, 3, 3, 7};
  const std::string path = WriteGz("labels.gz", LabelsFile(labels));
  absl::StatusOr<std::vector<uint8_t>> got = ReadIdxLabels(path);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, labels);
  got = ReadIdxLabels(path, 10, 2);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, (std::vector<uint8_t>{0, 9}));
}

TEST(Idx, MaxCountReadsOnlyTheFirstImages) {
  const std::string path = WriteGz("first.gz", ImagesFile(10, 2, 2));
  absl::StatusOr<IdxImages> images = ReadIdxImages(path, 4);
  ASSERT_TRUE(images.ok()) << images.status();
  EXPECT_EQ(images->count, 4);
  EXPECT_EQ(images->pixels.size(), 16u);
}

TEST(Idx, MissingFileIsNotFoundAndNamesTheDebianPackage) {
  const std::string path = TempPath("no-such-file.gz");
  absl::StatusOr<IdxImages> images = ReadIdxImages(path);
  EXPECT_EQ(images.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(images.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(images.status().message()),
              HasSubstr("dataset-fashion-mnist"));
  EXPECT_THAT(std::string(images.status().message()),
              HasSubstr("/usr/share/datasets/fashion-mnist/"));
  EXPECT_THAT(std::string(images.status().message()),
              HasSubstr("deploy/setup.sh"));
}

TEST(Idx, WrongMagicSaysWhichWasExpectedAndFound) {
  const std::string labels = WriteGz("labels-as-images.gz", LabelsFile({1, 2}));
  absl::Status s = ReadIdxImages(labels).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr(labels));
  EXPECT_THAT(std::string(s.message()), HasSubstr("expected magic 0x00000803"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("found 0x00000801"));

  const std::string images =
      WritePlain("images-as-labels", ImagesFile(1, 1, 1));
  s = ReadIdxLabels(images).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("expected magic 0x00000801"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("found 0x00000803"));

  const std::string text = WritePlain("text", {'h', 'e', 'l', 'l', 'o', '\n'});
  s = ReadIdxImages(text).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("not an IDX images file"));

  const std::string tiny = WritePlain("tiny", {0, 0});
  s = ReadIdxLabels(tiny).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("holds only 2 bytes"));
}

TEST(Idx, TruncatedDataSaysWhatTheHeaderPromised) {
  std::vector<uint8_t> file = ImagesFile(3, 4, 5);
  file.pop_back();
  for (const std::string& path :
       {WritePlain("short-images", file), WriteGz("short-images.gz", file)}) {
    absl::Status s = ReadIdxImages(path).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(s.message()), HasSubstr(path));
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("header says 3 images of 4x5 = 60 bytes, the file "
                          "holds 59"));
  }
  std::vector<uint8_t> labels = LabelsFile({1, 2, 3});
  labels.pop_back();
  const std::string path = WritePlain("short-labels", labels);
  absl::Status s = ReadIdxLabels(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("header says 3 labels"));

  const std::string header = WritePlain(
      "short-header", {0x00, 0x00, 0x08, 0x03, 0x00, 0x00, 0x00, 0x01});
  s = ReadIdxImages(header).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("truncated header"));
}

TEST(Idx, CutOffGzipStreamIsDataLoss) {
  const std::string full = WriteGz("cut.gz", ImagesFile(50, 28, 28));
  std::vector<uint8_t> bytes = ReadAll(full);
  ASSERT_GT(bytes.size(), 100u);
  bytes.resize(bytes.size() / 2);
  const std::string path = WritePlain("cut-half.gz", bytes);
  absl::Status s = ReadIdxImages(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(path));
}

TEST(Idx, CorruptGzipIsDataLoss) {
  const std::string full = WriteGz("corrupt.gz", ImagesFile(50, 28, 28));
  std::vector<uint8_t> bytes = ReadAll(full);
  ASSERT_GT(bytes.size(), 100u);
  for (size_t i = 20; i < 60; ++i) bytes[i] ^= 0x5a;
  const std::string path = WritePlain("corrupt-flipped.gz", bytes);
  absl::Status s = ReadIdxImages(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(path));
  EXPECT_THAT(std::string(s.message()), HasSubstr("gzip"));
}

TEST(Idx, LabelOutOfRangeNamesIndexAndValue) {
  const std::string path = WriteGz("bad-label.gz", LabelsFile({1, 2, 12, 3}));
  absl::Status s = ReadIdxLabels(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr(path));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("label 2 is 12; expected 0..9"));
}

}  // namespace
}  // namespace train
}  // namespace starling
