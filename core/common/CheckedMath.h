#pragma once
// Arithmetic on counts read from outside (an export, the wire): a crafted file may hold any
// int64, so sums and differences of them never overflow (signed overflow is undefined).

#include <cstdint>
#include <limits>

namespace hookscope {

/// a + b, held at the int64 range's ends instead of overflowing.
inline std::int64_t saturatingAdd(std::int64_t a, std::int64_t b) {
  std::int64_t sum = 0;
  if (!__builtin_add_overflow(a, b, &sum)) return sum;
  return b > 0 ? std::numeric_limits<std::int64_t>::max() : std::numeric_limits<std::int64_t>::min();
}

} // namespace hookscope
