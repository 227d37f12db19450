#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

namespace hookscope::test {

/// Folder the fixture script wrote (CTest sets HOOKSCOPE_FIXTURES); fails the test if unset.
inline std::string fixturesDir() {
  const char* dir = std::getenv("HOOKSCOPE_FIXTURES");
  if (!dir || !*dir) {
    ADD_FAILURE() << "HOOKSCOPE_FIXTURES is not set: run the tests through ctest, which makes "
                     "the fixtures first";
    return "/nonexistent-fixtures";
  }
  return dir;
}

inline std::string fixture(const std::string& name) { return fixturesDir() + "/" + name; }

/// The bundled sample models (CTest sets HOOKSCOPE_MODELS to resources/models).
inline std::string sampleModel(const std::string& name) {
  const char* dir = std::getenv("HOOKSCOPE_MODELS");
  return std::string(dir ? dir : "resources/models") + "/" + name;
}

/// |a - b| <= rel * max(|a|, |b|, scale): relative, with `scale` standing in for values
/// near zero (a mean of values of size `scale` cannot be more exact than that).
inline ::testing::AssertionResult closeRel(double a, double b, double rel, double scale = 0) {
  const double bound = rel * std::max({std::fabs(a), std::fabs(b), scale});
  if (std::fabs(a - b) <= bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << a << " vs " << b << " differ by " << std::fabs(a - b)
                                       << " > " << bound;
}

} // namespace hookscope::test
