#include "InputSpec.h"

#include <cmath>
#include <cstdlib>
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

const char* const kDtypes[] = {"float32", "float64", "float16", "bfloat16", "int64", "int32",
                               "int16",   "int8",    "uint8",   "bool"};

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
    if (dim.empty() || dim.find_first_not_of("0123456789") != std::string::npos) {
      return fail("dimension '" + dim + "' is not a whole number");
    }
    const long long size = std::atoll(dim.c_str());
    if (size <= 0 || size > (1LL << 31)) return fail("dimension '" + dim + "' is out of range");
    result.shape.push_back(size);
  }
  if (parts.size() >= 2) {
    bool known = false;
    for (const char* name : kDtypes) known = known || parts[1] == name;
    if (!known) return fail("unknown dtype '" + parts[1] + "'");
    result.dtype = parts[1];
  }
  if (parts.size() == 4) {
    if (!parseDouble(parts[2], &result.low)) return fail("LOW '" + parts[2] + "' is not a number");
    if (!parseDouble(parts[3], &result.high)) return fail("HIGH '" + parts[3] + "' is not a number");
    if (!(result.low < result.high)) return fail("LOW must be below HIGH");
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
