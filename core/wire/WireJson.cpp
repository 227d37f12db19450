#include "wire/WireJson.h"

#include "common/PrintableText.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

namespace hookscope {

using nlohmann::json;

json wireNumberJson(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return value;
}

bool wireNumberFrom(const json& value, double* out) {
  if (value.is_number()) {
    *out = value.get<double>();
    return true;
  }
  if (!value.is_string()) return false;
  const std::string& s = value.get_ref<const std::string&>();
  if (s == "nan") *out = std::numeric_limits<double>::quiet_NaN();
  else if (s == "inf") *out = std::numeric_limits<double>::infinity();
  else if (s == "-inf") *out = -std::numeric_limits<double>::infinity();
  else return false;
  return true;
}

std::int64_t wireInt(const json& j, const char* key, std::int64_t low, std::int64_t high, bool* ok) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) {
    *ok = false;
    return 0;
  }
  const auto value = it->get<std::int64_t>();
  if (value < low || value > high) *ok = false;
  return value;
}

std::string wireString(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return "";
  return cutAtCharacter(it->get<std::string>(), kMaxWireStringBytes);
}

std::string wireText(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

} // namespace hookscope
