#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hookscope {

/// The most values one synthetic input may hold (4 GiB of float32).
constexpr std::int64_t kMaxInputElements = std::int64_t(1) << 30;

/// A synthetic input: SHAPE[:DTYPE[:LOW:HIGH]], e.g. "8x3x32x32", "8x128:int64:0:30000".
/// Floats without bounds are standard normal; with bounds, uniform in [LOW, HIGH).
struct InputSpec {
  std::vector<std::int64_t> shape;
  std::string dtype = "float32";
  bool bounded = false;
  double low = 0;
  double high = 1;

  /// Parses a spec; on failure returns false and sets `error` naming the bad part.
  static bool parse(const std::string& text, InputSpec* spec, std::string* error);
  /// The spec written back in the same syntax.
  std::string toString() const;
  bool isInteger() const;
};

} // namespace hookscope
