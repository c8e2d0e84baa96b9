// Replays inputs through a libFuzzer harness (LLVMFuzzerTestOneInput)
// without libFuzzer, so that the seed corpus is checked with the normal
// toolchain in every `bazel test` run (tests/fuzz/run_fuzzers.sh does the
// fuzzing proper). Arguments: files, or directories whose files are all
// replayed. Each input is also replayed truncated at every length (up to
// 1 KiB, then in steps) and with 64 single-bit flips chosen deterministically,
// a cheap stand-in for mutation. A crash or sanitizer report fails the test;
// so does finding no input at all.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv)
    __attribute__((weak));

namespace {

void Collect(const std::string& path, std::vector<std::string>* files) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    std::fprintf(stderr, "fuzz_driver: cannot stat %s\n", path.c_str());
    return;
  }
  if (!S_ISDIR(st.st_mode)) {
    files->push_back(path);
    return;
  }
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return;
  std::vector<std::string> names;
  while (struct dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(path + "/" + name);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) Collect(name, files);
}

void Run(const std::vector<uint8_t>& input) {
  // A copy of exactly the input's size, so that ASan (where built with it)
  // sees reads past the end.
  std::vector<uint8_t> copy(input);
  LLVMFuzzerTestOneInput(copy.data(), copy.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) Collect(argv[i], &files);
  if (files.empty()) {
    std::fprintf(stderr, "fuzz_driver: no input files given\n");
    return 1;
  }
  uint64_t runs = 0;
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (const std::string& file : files) {
    std::ifstream in(file, std::ios::binary);
    const std::vector<uint8_t> input((std::istreambuf_iterator<char>(in)),
                                     std::istreambuf_iterator<char>());
    Run(input);
    ++runs;
    for (size_t n = 0; n < input.size();
         n += n < 1024 ? 1 : std::max<size_t>(1, input.size() / 64)) {
      Run(std::vector<uint8_t>(input.begin(), input.begin() + n));
      ++runs;
    }
    for (int flip = 0; flip < 64 && !input.empty(); ++flip) {
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      std::vector<uint8_t> mutated(input);
      mutated[state % mutated.size()] ^= static_cast<uint8_t>(1u << (flip % 8));
      Run(mutated);
      ++runs;
    }
  }
  std::printf("fuzz_driver: %zu input file(s), %llu runs, no crash\n",
              files.size(), static_cast<unsigned long long>(runs));
  return 0;
}
