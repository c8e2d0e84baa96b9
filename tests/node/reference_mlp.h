// ReferenceMlp: what the single-process references of the training tests
// start from (training_test's sync SGD, easgd_test's Sync EASGD): the first
// `train_limit` Fashion-MNIST training images, the CPU backend, and the MLP
// starling-worker trains, with buffers for up to max(batch, 256) samples.
// The reference runs the same BLAS as the workers on the same machine, so
// whatever kernels OpenBLAS picks for this CPU, both sides take them.
#ifndef STARLING_TESTS_NODE_REFERENCE_MLP_H_
#define STARLING_TESTS_NODE_REFERENCE_MLP_H_

#include <cstdint>
#include <memory>

#include "worker/train/backend.h"
#include "worker/train/dataset.h"
#include "worker/train/model.h"

namespace starling {
namespace testing_node {

struct ReferenceMlp {
  train::Dataset data;
  std::unique_ptr<train::Backend> backend;  // outlives `model`
  std::unique_ptr<train::Model> model;
};

// Null, after a test failure that says what could not be made, when the
// data, backend or model could not be made.
std::unique_ptr<ReferenceMlp> MakeReferenceMlp(int64_t train_limit, int batch);

}  // namespace testing_node
}  // namespace starling

#endif  // STARLING_TESTS_NODE_REFERENCE_MLP_H_
