#pragma once

#include "kernels/TensorStats.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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

/// Checks a capture against a golden entry {numel, l2, mean, min, max} written by the fixture
/// script: norm within `rel`, the others within `rel` of the values' root mean square.
inline void expectStatsMatch(const TensorStats& s, const nlohmann::json& ref, double rel = 1e-5) {
  const double numel = ref["numel"];
  EXPECT_EQ(s.numel, std::int64_t(numel));
  const double rms = double(ref["l2"]) / std::sqrt(std::max(1.0, numel));
  EXPECT_TRUE(closeRel(s.l2norm, ref["l2"], rel)) << "l2norm";
  EXPECT_TRUE(closeRel(s.mean, ref["mean"], rel, rms)) << "mean";
  EXPECT_TRUE(closeRel(s.min, ref["min"], rel, rms)) << "min";
  EXPECT_TRUE(closeRel(s.max, ref["max"], rel, rms)) << "max";
}

} // namespace hookscope::test
