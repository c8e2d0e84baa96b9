// Parsing quadratic_worker's result line ("loss=... params=<hex>") and the
// plain-C++ reference of its synchronous SGD, for the node tests. Testonly;
// stateless.
#ifndef STARLING_TESTS_NODE_TEST_PARAMS_H_
#define STARLING_TESTS_NODE_TEST_PARAMS_H_

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "worker/examples/quadratic.h"

namespace starling {
namespace testing_node {

// The hex digits after "params=" (empty if absent).
inline std::string ParamsHex(const std::string& out) {
  const size_t at = out.find("params=");
  if (at == std::string::npos) return "";
  size_t end = out.find_first_of("\n ", at);
  if (end == std::string::npos) end = out.size();
  return out.substr(at + 7, end - at - 7);
}

inline std::vector<float> ParamsOf(const std::string& out) {
  const std::string hex = ParamsHex(out);
  std::vector<float> values;
  for (size_t i = 0; i + 8 <= hex.size(); i += 8) {
    const uint32_t bits = static_cast<uint32_t>(
        std::strtoul(hex.substr(i, 8).c_str(), nullptr, 16));
    float v;
    std::memcpy(&v, &bits, sizeof(v));
    values.push_back(v);
  }
  return values;
}

// What `steps` steps of synchronous SGD (learning rate `lr`, on the mean of
// `workers` quadratic_worker gradients summed in fp64, from x = 0) give.
inline std::vector<float> SyncSgdReference(int workers, int dim, int steps,
                                           float lr) {
  std::vector<float> x(dim, 0.0f), grad(dim);
  for (int step = 0; step < steps; ++step) {
    std::vector<double> sum(dim, 0.0);
    for (int w = 0; w < workers; ++w) {
      examples::QuadraticGradient(w, workers, x, absl::MakeSpan(grad));
      for (int i = 0; i < dim; ++i) sum[i] += grad[i];
    }
    for (int i = 0; i < dim; ++i) {
      x[i] -= lr * static_cast<float>(sum[i] / workers);
    }
  }
  return x;
}

}  // namespace testing_node
}  // namespace starling

#endif  // STARLING_TESTS_NODE_TEST_PARAMS_H_
