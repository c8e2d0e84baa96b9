#include "server/base/cpu_features.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace starling {
namespace {

class PortableVariable : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* old = std::getenv("STARLING_PORTABLE_KERNELS");
    had_ = old != nullptr;
    if (had_) old_ = old;
  }
  void TearDown() override {
    if (had_) {
      setenv("STARLING_PORTABLE_KERNELS", old_.c_str(), 1);
    } else {
      unsetenv("STARLING_PORTABLE_KERNELS");
    }
  }

 private:
  bool had_ = false;
  std::string old_;
};

TEST_F(PortableVariable, OffValuesKeepTheDetectedFeatures) {
  unsetenv("STARLING_PORTABLE_KERNELS");
  EXPECT_FALSE(PortableKernelsRequested());
  for (const char* off : {"", "0", "false", "No"}) {
    setenv("STARLING_PORTABLE_KERNELS", off, 1);
    EXPECT_FALSE(PortableKernelsRequested()) << "'" << off << "'";
  }
}

TEST_F(PortableVariable, AnyOtherValueAsksForThePortablePaths) {
  for (const char* on : {"1", "yes", "true"}) {
    setenv("STARLING_PORTABLE_KERNELS", on, 1);
    EXPECT_TRUE(PortableKernelsRequested()) << on;
  }
}

TEST(CpuFeatures, InUseIsDetectedOrNothingAsTheEnvironmentSaidAtStart) {
  // The process's answer is fixed at first use: under
  // STARLING_PORTABLE_KERNELS=1 (tests/run_all.sh's portable run) every
  // feature is off; otherwise it is what the CPU has.
  const CpuFeatures& in_use = CpuFeaturesInUse();
  if (PortableKernelsRequested()) {
    EXPECT_FALSE(in_use.f16c);
  } else {
    EXPECT_EQ(in_use.f16c, DetectCpuFeatures().f16c);
  }
}

}  // namespace
}  // namespace starling
