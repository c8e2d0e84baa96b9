// Tasks, labels, partitions, the LIBSVM writer and evaluation, on
// hand-made images (no dataset needed).
#include "worker/svm/svm_data.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace starling {
namespace svm {
namespace {

LabeledImages Tiny() {
  LabeledImages images;
  images.features = 3;
  images.x = {0.0f,       0.5f, 1.0f,  //
              0.25f,      0.0f, 0.0f,  //
              1.0f / 255, 0.0f, 0.75f};
  images.labels = {5, 7, 5};
  return images;
}

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

TEST(SvmData, ParsesTasksAndListsTheirProblems) {
  EXPECT_EQ(*ParseTask("tshirt_shirt"), Task::kTShirtShirt);
  EXPECT_EQ(*ParseTask("sandal_sneaker"), Task::kSandalSneaker);
  EXPECT_EQ(*ParseTask("ovr"), Task::kOneVsRest);
  const absl::Status bad = ParseTask("cats").status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("sandal_sneaker"), absl::string_view::npos);
  EXPECT_EQ(PositiveClasses(Task::kTShirtShirt), std::vector<int>{0});
  EXPECT_EQ(PositiveClasses(Task::kOneVsRest).size(), 10u);
}

TEST(SvmData, StridesSamplesOverWorkers) {
  const LabeledImages all = Tiny();
  const LabeledImages first = StridedPart(all, 2, 0);
  const LabeledImages second = StridedPart(all, 2, 1);
  EXPECT_EQ(first.labels, (std::vector<uint8_t>{5, 5}));
  EXPECT_EQ(second.labels, (std::vector<uint8_t>{7}));
  EXPECT_EQ(first.x[3], all.x[6]);
  EXPECT_EQ(second.x, std::vector<float>(all.x.begin() + 3, all.x.begin() + 6));
  EXPECT_EQ(SignLabels(all.labels, 5), (std::vector<int8_t>{1, -1, 1}));
}

TEST(SvmData, WritesLibsvmTextThatRoundTripsTheFloats) {
  const std::string path = TempDir() + "/tiny.svm";
  ASSERT_TRUE(WriteLibsvm(path, Tiny(), Task::kSandalSneaker).ok());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(),
            "+1 2:0.5 3:1\n"
            "-1 1:0.25\n"
            "+1 1:0.00392156886 3:0.75\n");
  EXPECT_EQ(static_cast<float>(std::strtod("0.00392156886", nullptr)),
            1.0f / 255);
  ASSERT_TRUE(WriteLibsvm(path, Tiny(), Task::kOneVsRest).ok());
  std::ifstream again(path);
  std::string line;
  std::getline(again, line);
  EXPECT_EQ(line, "+5 2:0.5 3:1");
  const absl::Status missing =
      WriteLibsvm("/nonexistent/dir/x.svm", Tiny(), Task::kOneVsRest);
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("/nonexistent/dir/x.svm"),
            absl::string_view::npos);
}

TEST(SvmData, PredictsPairsBySignAndOneVsRestByArgmax) {
  LabeledImages images = Tiny();
  LinearModel pair;
  pair.task = Task::kSandalSneaker;
  pair.options.bias = 1;
  pair.positive_classes = {5};
  pair.w = {{0, 0, 1, -0.5}};  // x_3 - 0.5
  EXPECT_EQ(Predict(pair, images, 0), 5);
  EXPECT_EQ(Predict(pair, images, 1), 7);
  EXPECT_DOUBLE_EQ(Accuracy(pair, images), 1.0);

  LinearModel ovr;
  ovr.task = Task::kOneVsRest;
  ovr.options.bias = -1;
  ovr.positive_classes = {5, 7};
  ovr.w = {{0, 0, 1}, {1, 0, 0}};
  EXPECT_EQ(Predict(ovr, images, 0), 5);
  EXPECT_EQ(Predict(ovr, images, 1), 7);
  EXPECT_DOUBLE_EQ(Accuracy(ovr, images), 1.0);
}

TEST(SvmData, NamesTheMissingFile) {
  const absl::Status s =
      LoadTaskImages("/nonexistent", "train", Task::kOneVsRest, 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("/nonexistent/train-images-idx3-ubyte.gz"),
            absl::string_view::npos)
      << s;
  EXPECT_EQ(LoadTaskImages("/x", "valid", Task::kOneVsRest, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace svm
}  // namespace starling
