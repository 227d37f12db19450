#include "common/InputSpec.h"

#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <sstream>

namespace hookscope {

namespace {

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, sep)) parts.push_back(part);
  if (!text.empty() && text.back() == sep) parts.emplace_back();
  return parts;
}

bool parseDouble(const std::string& text, double* value) {
  if (text.empty()) return false;
  char* end = nullptr;
  *value = std::strtod(text.c_str(), &end);
  return end && *end == '\0' && std::isfinite(*value);
}

// The dtypes a spec may name, with the representable bounds of [LOW, HIGH) in each.
struct DtypeRange {
  const char* name;
  double lowest, highest;
};
const DtypeRange kDtypes[] = {
    {"float32", -3.4028234663852886e38, 3.4028234663852886e38},
    {"float64", -1.7976931348623157e308, 1.7976931348623157e308},
    {"float16", -65504, 65504},
    {"bfloat16", -3.3895313892515355e38, 3.3895313892515355e38},
    {"int64", -9223372036854775808.0, 9223372036854775807.0},
    {"int32", -2147483648.0, 2147483648.0},
    {"int16", -32768, 32768},
    {"int8", -128, 128},
    {"uint8", 0, 256},
    {"bool", 0, 2},
};

const DtypeRange* findDtype(const std::string& name) {
  for (const auto& dtype : kDtypes) {
    if (name == dtype.name) return &dtype;
  }
  return nullptr;
}

// "" when uniform or randint values in [low, high) can be made in the spec's dtype.
std::string boundsProblem(const InputSpec& spec) {
  const DtypeRange* range = findDtype(spec.dtype);
  if (!range) return "unknown dtype '" + spec.dtype + "'";
  if (spec.low < range->lowest || spec.high > range->highest) {
    std::ostringstream bounds;  // 1e+308, not three hundred digits
    bounds << std::setprecision(6) << "bounds [" << spec.low << ", " << spec.high << ") do not fit " << spec.dtype;
    return bounds.str();
  }
  if (!spec.isInteger() && !(spec.high - spec.low <= range->highest)) {  // also an infinite width
    return "the width of [LOW, HIGH) overflows " + spec.dtype + ": narrow the bounds";
  }
  if (spec.isInteger() && (spec.low != std::floor(spec.low) || spec.high != std::floor(spec.high))) {
    return "integer bounds must be whole numbers for " + spec.dtype;
  }
  if (spec.isInteger() && spec.high - spec.low > 9.2e18) {
    return "the width of [LOW, HIGH) overflows int64: narrow the bounds";
  }
  return "";
}

} // namespace

bool InputSpec::isInteger() const {
  return dtype.rfind("int", 0) == 0 || dtype == "uint8" || dtype == "bool";
}

bool InputSpec::parse(const std::string& text, InputSpec* spec, std::string* error) {
  auto fail = [&](const std::string& message) {
    if (error) *error = "bad input spec '" + text + "': " + message +
                        " (expected SHAPE[:DTYPE[:LOW:HIGH]], e.g. 8x3x32x32 or 8x128:int64:0:30000)";
    return false;
  };
  InputSpec result;
  const auto parts = split(text, ':');
  if (parts.empty() || parts[0].empty()) return fail("no shape");
  if (parts.size() != 1 && parts.size() != 2 && parts.size() != 4) {
    return fail("give either a dtype alone or a dtype with both LOW and HIGH");
  }
  for (const auto& dim : split(parts[0], 'x')) {
    if (dim.size() > 1 && dim[0] == '-' && dim.find_first_not_of("0123456789", 1) == std::string::npos) {
      return fail("dimension '" + dim + "' is negative: a size is a whole number from 1");
    }
    if (dim.empty() || dim.find_first_not_of("0123456789") != std::string::npos) {
      return fail("dimension '" + dim + "' is not a whole number");
    }
    if (dim.size() > 10 || std::atoll(dim.c_str()) <= 0 || std::atoll(dim.c_str()) >= (1LL << 31)) {
      return fail("dimension '" + dim + "' is out of range (1 to 2147483647)");
    }
    result.shape.push_back(std::atoll(dim.c_str()));
  }
  double elements = 1;
  for (const auto size : result.shape) elements *= double(size);
  if (elements > double(kMaxInputElements)) {
    std::ostringstream count;
    count << std::setprecision(3) << elements;  // may exceed any integer type
    return fail("the shape holds " + count.str() + " values, more than the " + std::to_string(kMaxInputElements) +
                " a synthetic input may have");
  }
  if (parts.size() >= 2) {
    if (!findDtype(parts[1])) return fail("unknown dtype '" + parts[1] + "'");
    result.dtype = parts[1];
  }
  if (parts.size() == 4) {
    if (!parseDouble(parts[2], &result.low)) return fail("LOW '" + parts[2] + "' is not a number");
    if (!parseDouble(parts[3], &result.high)) return fail("HIGH '" + parts[3] + "' is not a number");
    if (!(result.low < result.high)) return fail("LOW must be below HIGH");
    if (std::string problem = boundsProblem(result); !problem.empty()) return fail(problem);
    result.bounded = true;
  } else if (result.isInteger()) {
    if (result.dtype == "bool") {
      result.high = 2;
    } else {
      result.high = 10;
    }
    result.bounded = true;
  }
  *spec = result;
  return true;
}

std::string InputSpec::toString() const {
  std::ostringstream out;
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? "x" : "") << shape[i];
  out << ':' << dtype;
  if (bounded) out << ':' << low << ':' << high;
  return out.str();
}

} // namespace hookscope
