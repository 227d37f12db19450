#include "WireStats.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

namespace hookscope {

using nlohmann::json;

namespace {

constexpr int kMaxDims = 64;

bool readNumber(const json& j, const char* key, double* out) {
  const auto it = j.find(key);
  if (it == j.end()) return false;
  if (it->is_number()) {
    *out = it->get<double>();
    return true;
  }
  if (!it->is_string()) return false;
  const std::string& s = it->get_ref<const std::string&>();
  if (s == "nan") *out = std::numeric_limits<double>::quiet_NaN();
  else if (s == "inf") *out = std::numeric_limits<double>::infinity();
  else if (s == "-inf") *out = -std::numeric_limits<double>::infinity();
  else return false;
  return true;
}

bool readCount(const json& j, const char* key, std::int64_t high, std::int64_t* out) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return false;
  const auto value = it->get<std::int64_t>();
  if (value < 0 || value > high) return false;
  *out = value;
  return true;
}

} // namespace

bool shapeFromWire(const json& j, const char* what, std::vector<std::int64_t>* shape, std::int64_t* numel,
                   std::string* error) {
  const auto it = j.find("shape");
  if (it == j.end() || !it->is_array() || it->size() > std::size_t(kMaxDims)) {
    *error = std::string(what) + " has no shape";
    return false;
  }
  shape->clear();
  *numel = 1;
  for (const auto& d : *it) {
    if (!d.is_number_integer() || d.get<std::int64_t>() < 0) {
      *error = std::string(what) + "'s shape has a bad dimension";
      return false;
    }
    const auto size = d.get<std::int64_t>();
    if (size != 0 && *numel > std::numeric_limits<std::int64_t>::max() / 16 / size) {
      *error = std::string(what) + "'s shape is too large";
      return false;
    }
    *numel *= size;
    shape->push_back(size);
  }
  return true;
}

json wireNumberJson(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return value;
}

json statsToWire(const TensorStats& s) {
  return {{"shape", s.shape},
          {"dtype", s.dtype},
          {"numel", s.numel},
          {"min", wireNumberJson(s.min)},
          {"max", wireNumberJson(s.max)},
          {"mean", wireNumberJson(s.mean)},
          {"std", wireNumberJson(s.std)},
          {"l2", wireNumberJson(s.l2norm)},
          {"zeros", wireNumberJson(s.zeroFraction)},
          {"nan", s.nanCount},
          {"inf", s.infCount},
          {"hist", s.histogram},
          {"lo", wireNumberJson(s.histLow)},
          {"hi", wireNumberJson(s.histHigh)}};
}

bool statsFromWire(const json& j, TensorStats* out, std::string* error) {
  if (!j.is_object()) {
    *error = "a stats entry is not an object";
    return false;
  }
  TensorStats s;
  std::int64_t numel = 0;
  if (!shapeFromWire(j, "a stats entry", &s.shape, &numel, error)) return false;
  const auto dtype = j.find("dtype");
  if (dtype == j.end() || !dtype->is_string() || dtype->get_ref<const std::string&>().size() > 32) {
    *error = "a stats entry has no dtype";
    return false;
  }
  s.dtype = dtype->get<std::string>();
  if (!readCount(j, "numel", numel, &s.numel) || s.numel != numel) {
    *error = "a stats entry's numel does not match its shape";
    return false;
  }
  if (!readNumber(j, "min", &s.min) || !readNumber(j, "max", &s.max) || !readNumber(j, "mean", &s.mean) ||
      !readNumber(j, "std", &s.std) || !readNumber(j, "l2", &s.l2norm) || !readNumber(j, "zeros", &s.zeroFraction) ||
      !readNumber(j, "lo", &s.histLow) || !readNumber(j, "hi", &s.histHigh)) {
    *error = "a stats entry lacks min, max, mean, std, l2, zeros, lo or hi";
    return false;
  }
  if (!readCount(j, "nan", numel, &s.nanCount) || !readCount(j, "inf", numel, &s.infCount) ||
      s.nanCount + s.infCount > numel) {
    *error = "a stats entry's NaN or Inf count is missing or over its numel";
    return false;
  }
  if (!(s.zeroFraction >= 0 && s.zeroFraction <= 1)) {
    *error = "a stats entry's zero fraction is outside [0, 1]";
    return false;
  }
  const auto hist = j.find("hist");
  if (hist == j.end() || !hist->is_array() || hist->size() > kMaxWireBins) {
    *error = "a stats entry has no histogram (or over " + std::to_string(kMaxWireBins) + " bins)";
    return false;
  }
  std::int64_t total = 0;
  for (const auto& count : *hist) {
    if (!count.is_number_integer() || count.get<std::int64_t>() < 0 || count.get<std::int64_t>() > numel - total) {
      *error = "a stats entry's histogram counts more values than the tensor holds";
      return false;
    }
    total += count.get<std::int64_t>();
    s.histogram.push_back(count.get<std::int64_t>());
  }
  if (!s.histogram.empty() && !(std::isfinite(s.histLow) && std::isfinite(s.histHigh) && s.histLow <= s.histHigh)) {
    *error = "a stats entry's histogram edges are not finite and ordered";
    return false;
  }
  *out = std::move(s);
  return true;
}

} // namespace hookscope
