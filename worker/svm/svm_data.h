// Fashion-MNIST for the linear SVM: the tasks (two binary pairs and
// 10-class one-vs-rest), pixels scaled to [0, 1], +-1 labels, the workers'
// partitions, a LIBSVM text writer (so that liblinear-train sees the same
// numbers), and evaluation of the trained weights.
//
// Tasks:   tshirt_shirt    T-shirt/top (class 0, +1) vs Shirt (6, -1)
//          sandal_sneaker  Sandal (5, +1) vs Sneaker (7, -1)
//          ovr             all 10 classes; one binary problem per class c
//                          (c: +1, the rest: -1), predicting the argmax of
//                          the 10 decision values
// Partition: worker k of W holds the samples i with i % W == k (strided,
// so each worker sees every class in about the same proportion).
//
// Thread safety: the functions are thread-safe (no shared state).
#ifndef STARLING_WORKER_SVM_SVM_DATA_H_
#define STARLING_WORKER_SVM_SVM_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "worker/svm/dcd.h"

namespace starling {
namespace svm {

enum class Task { kTShirtShirt, kSandalSneaker, kOneVsRest };
absl::StatusOr<Task> ParseTask(absl::string_view name);
const char* TaskName(Task task);

// The binary problems of a task, by their positive class: {0}, {5}, or
// {0, 1, ..., 9} for one-vs-rest.
std::vector<int> PositiveClasses(Task task);

// Images of a task's classes, in file order.
struct LabeledImages {
  int features = 0;             // 784 for Fashion-MNIST
  std::vector<float> x;         // size() rows of `features`, in [0, 1]
  std::vector<uint8_t> labels;  // the Fashion-MNIST class, 0..9
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
};

// Reads `split` ("train" or "test") from `dir` (worker/train/idx.h's
// reader and file names) and keeps the task's classes; with limit > 0,
// only the first `limit` of those. Errors: the reader's (NotFound names
// the file and the Debian package), InvalidArgument for a bad split or
// limit, or when nothing is left.
absl::StatusOr<LabeledImages> LoadTaskImages(absl::string_view dir,
                                             absl::string_view split, Task task,
                                             int64_t limit);

// Rows i with i % workers == worker. REQUIRES: 0 <= worker < workers.
LabeledImages StridedPart(const LabeledImages& all, int workers, int worker);

// +1 where labels[i] == positive, -1 elsewhere.
std::vector<int8_t> SignLabels(absl::Span<const uint8_t> labels, int positive);

// A Problem over `images` with labels `y`; borrows both.
Problem MakeProblem(const LabeledImages& images, absl::Span<const int8_t> y);

// LIBSVM text ("label index:value ..." with 1-based indices, zeros left
// out, values printed to round-trip float32): labels +1/-1 for a pair,
// the class 0..9 for one-vs-rest (LIBLINEAR then trains one-vs-rest
// itself). Errors: PermissionDenied or NotFound when the file cannot be
// created, DataLoss when a write fails.
absl::Status WriteLibsvm(const std::string& path, const LabeledImages& images,
                         Task task);

// The trained weights of a task: one vector per positive class.
struct LinearModel {
  Task task = Task::kTShirtShirt;
  DcdOptions options;  // for the bias
  std::vector<int> positive_classes;
  std::vector<std::vector<double>> w;
};

// The predicted class of row `row`.
int Predict(const LinearModel& model, const LabeledImages& images, int64_t row);
// Fraction of rows predicted right, in [0, 1] (0 for no rows).
double Accuracy(const LinearModel& model, const LabeledImages& images);

}  // namespace svm
}  // namespace starling

#endif  // STARLING_WORKER_SVM_SVM_DATA_H_
