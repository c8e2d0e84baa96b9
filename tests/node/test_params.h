// Parsing quadratic_worker's result line ("loss=... params=<hex>") for the
// node tests. Testonly; stateless.
#ifndef STARLING_TESTS_NODE_TEST_PARAMS_H_
#define STARLING_TESTS_NODE_TEST_PARAMS_H_

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

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

}  // namespace testing_node
}  // namespace starling

#endif  // STARLING_TESTS_NODE_TEST_PARAMS_H_
