// End-to-end check that the pieces train: plain single-process SGD on the
// MLP, lr 0.1, batch 64, one epoch over the first 6000 training images, then
// the first 2000 test images must be classified better than 70%.
#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/train/backend.h"
#include "worker/train/dataset.h"
#include "worker/train/model.h"

namespace starling {
namespace train {
namespace {

TEST(TrainSmoke, OneEpochOfMlpSgdLearnsFashionMnist) {
  const std::string dir(kDefaultFashionMnistDir);
  struct stat st;
  if (stat((dir + "/train-images-idx3-ubyte.gz").c_str(), &st) != 0) {
    GTEST_SKIP() << dir
                 << " has no train-images-idx3-ubyte.gz; install Debian's "
                    "dataset-fashion-mnist (deploy/setup.sh) to run this";
  }
  absl::StatusOr<Dataset> train = LoadFashionMnist(dir, "train", 6000);
  ASSERT_TRUE(train.ok()) << train.status();
  absl::StatusOr<Dataset> test = LoadFashionMnist(dir, "test", 2000);
  ASSERT_TRUE(test.ok()) << test.status();

  const int batch = 64;
  const float lr = 0.1f;
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateBackend("cpu");
  ASSERT_TRUE(backend.ok()) << backend.status();
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Create(ModelKind::kMlp, backend->get(), batch);
  ASSERT_TRUE(model.ok()) << model.status();
  Model& m = **model;
  std::vector<float> params(m.parameter_count());
  m.InitParameters(1, absl::MakeSpan(params));

  const std::vector<int64_t> order = EpochOrder(1, 0, train->size());
  std::vector<float> x(batch * kImageElements);
  std::vector<uint8_t> y(batch);
  float first_loss = 0.0f, loss = 0.0f;
  for (int64_t p = 0; p < NumPartitions(train->size(), batch); ++p) {
    absl::Span<const int64_t> part = PartitionSamples(order, p, batch);
    train->Gather(part, x.data(), y.data());
    ASSERT_TRUE(m.SetParameters(params).ok());
    ASSERT_TRUE(m.Forward(x.data(), static_cast<int>(part.size())).ok());
    absl::StatusOr<float> l = m.Loss(y.data());
    ASSERT_TRUE(l.ok());
    loss = *l;
    if (p == 0) first_loss = loss;
    ASSERT_TRUE(m.Backward(y.data(), nullptr).ok());
    absl::Span<const float> g = m.gradients();
    for (size_t i = 0; i < params.size(); ++i) params[i] -= lr * g[i];
  }
  ASSERT_TRUE(m.SetParameters(params).ok());
  absl::StatusOr<EvalResult> eval = m.Evaluate(*test, 0, test->size(), batch);
  ASSERT_TRUE(eval.ok()) << eval.status();
  const double accuracy = static_cast<double>(eval->correct) / eval->count;
  std::cout << "first batch loss " << first_loss << ", last " << loss
            << "; test loss " << eval->loss_sum / eval->count << ", accuracy "
            << accuracy << "\n";
  EXPECT_GT(accuracy, 0.70);
}

}  // namespace
}  // namespace train
}  // namespace starling
