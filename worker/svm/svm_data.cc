// Loading, partitioning, LIBSVM export and evaluation; see svm_data.h.
#include "worker/svm/svm_data.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "worker/train/dataset.h"
#include "worker/train/idx.h"

namespace starling {
namespace svm {
namespace {

constexpr int kClasses = 10;

bool Keeps(Task task, int label) {
  switch (task) {
    case Task::kTShirtShirt:
      return label == 0 || label == 6;
    case Task::kSandalSneaker:
      return label == 5 || label == 7;
    case Task::kOneVsRest:
      return true;
  }
  return false;
}

// The negative class of a pair.
int PairNegative(Task task) { return task == Task::kTShirtShirt ? 6 : 7; }

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

absl::StatusOr<Task> ParseTask(absl::string_view name) {
  if (name == "tshirt_shirt") return Task::kTShirtShirt;
  if (name == "sandal_sneaker") return Task::kSandalSneaker;
  if (name == "ovr") return Task::kOneVsRest;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown task \"", name,
                   "\"; expected tshirt_shirt, sandal_sneaker or ovr"));
}

const char* TaskName(Task task) {
  switch (task) {
    case Task::kTShirtShirt:
      return "tshirt_shirt";
    case Task::kSandalSneaker:
      return "sandal_sneaker";
    case Task::kOneVsRest:
      return "ovr";
  }
  return "?";
}

std::vector<int> PositiveClasses(Task task) {
  if (task == Task::kTShirtShirt) return {0};
  if (task == Task::kSandalSneaker) return {5};
  std::vector<int> all;
  for (int c = 0; c < kClasses; ++c) all.push_back(c);
  return all;
}

absl::StatusOr<LabeledImages> LoadTaskImages(absl::string_view dir,
                                             absl::string_view split, Task task,
                                             int64_t limit) {
  if (limit < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample limit must be >= 0 (0 = all), got ", limit));
  }
  // Every sample: the limit counts the task's classes only.
  absl::StatusOr<train::RawSplit> raw =
      train::ReadFashionMnistSplit(dir, split);
  if (!raw.ok()) return raw.status();
  const train::IdxImages* images = &raw->images;
  const std::vector<uint8_t>* labels = &raw->labels;
  const std::string& image_path = raw->image_path;
  LabeledImages out;
  out.features = images->rows * images->cols;
  const int64_t cap = limit > 0 ? limit : std::numeric_limits<int64_t>::max();
  for (int64_t i = 0; i < images->count && out.size() < cap; ++i) {
    const int label = (*labels)[i];
    if (!Keeps(task, label)) continue;
    const uint8_t* px = images->pixels.data() + i * out.features;
    for (int j = 0; j < out.features; ++j) {
      out.x.push_back(static_cast<float>(px[j]) / 255.0f);
    }
    out.labels.push_back(static_cast<uint8_t>(label));
  }
  if (out.size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(image_path, " holds no samples of task ", TaskName(task)));
  }
  return out;
}

LabeledImages StridedPart(const LabeledImages& all, int workers, int worker) {
  LabeledImages part;
  part.features = all.features;
  for (int64_t i = worker; i < all.size(); i += workers) {
    const float* row = all.x.data() + i * all.features;
    part.x.insert(part.x.end(), row, row + all.features);
    part.labels.push_back(all.labels[i]);
  }
  return part;
}

std::vector<int8_t> SignLabels(absl::Span<const uint8_t> labels, int positive) {
  std::vector<int8_t> y(labels.size());
  for (size_t i = 0; i < labels.size(); ++i) {
    y[i] = labels[i] == positive ? 1 : -1;
  }
  return y;
}

Problem MakeProblem(const LabeledImages& images, absl::Span<const int8_t> y) {
  Problem p;
  p.features = images.features;
  p.x = images.x;
  p.y = y;
  return p;
}

absl::Status WriteLibsvm(const std::string& path, const LabeledImages& images,
                         Task task) {
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "w"));
  if (f == nullptr) {
    const int error = errno;
    const std::string why =
        absl::StrCat("cannot create ", path, ": ", std::strerror(error));
    return error == EACCES ? absl::PermissionDeniedError(why)
                           : absl::NotFoundError(why);
  }
  bool ok = true;
  for (int64_t i = 0; i < images.size() && ok; ++i) {
    const int label = images.labels[i];
    const int out_label = task == Task::kOneVsRest
                              ? label
                              : (label == PositiveClasses(task)[0] ? 1 : -1);
    ok = std::fprintf(f.get(), "%+d", out_label) > 0;
    const float* row = images.x.data() + i * images.features;
    for (int j = 0; j < images.features && ok; ++j) {
      if (row[j] == 0.0f) continue;
      // %.9g round-trips a float32 exactly.
      ok = std::fprintf(f.get(), " %d:%.9g", j + 1,
                        static_cast<double>(row[j])) > 0;
    }
    ok = ok && std::fputc('\n', f.get()) != EOF;
  }
  if (!ok || std::fflush(f.get()) != 0) {
    return absl::DataLossError(
        absl::StrCat("writing ", path, " failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

int Predict(const LinearModel& model, const LabeledImages& images,
            int64_t row) {
  Problem p;
  p.features = images.features;
  p.x = images.x;
  // Decision() reads only x; y is not consulted.
  if (model.task != Task::kOneVsRest) {
    const double v = Decision(p, model.options, model.w[0], row);
    return v > 0 ? model.positive_classes[0] : PairNegative(model.task);
  }
  int best = -1;
  double best_value = -std::numeric_limits<double>::infinity();
  for (size_t c = 0; c < model.w.size(); ++c) {
    const double v = Decision(p, model.options, model.w[c], row);
    if (best < 0 || v > best_value) {
      best = model.positive_classes[c];
      best_value = v;
    }
  }
  return best;
}

double Accuracy(const LinearModel& model, const LabeledImages& images) {
  if (images.size() == 0) return 0;
  int64_t right = 0;
  for (int64_t i = 0; i < images.size(); ++i) {
    if (Predict(model, images, i) == images.labels[i]) ++right;
  }
  return static_cast<double>(right) / static_cast<double>(images.size());
}

}  // namespace svm
}  // namespace starling
