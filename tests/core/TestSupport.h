#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

namespace hookscope::test {

/// Folder the fixture script writes (the make_fixtures test, which ctest runs first);
/// HOOKSCOPE_FIXTURES overrides it.
inline std::string fixturesDir() {
  const char* dir = std::getenv("HOOKSCOPE_FIXTURES");
  return dir && *dir ? dir : HOOKSCOPE_FIXTURES_DIR;
}

inline std::string fixture(const std::string& name) { return fixturesDir() + "/" + name; }

/// The bundled sample models in resources/models.
inline std::string sampleModel(const std::string& name) {
  return std::string(HOOKSCOPE_MODELS_DIR) + "/" + name;
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
