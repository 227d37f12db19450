#include "WireStats.h"

#include "WireJson.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

namespace hookscope {

using nlohmann::json;

namespace {

constexpr int kMaxDims = 64;

bool readNumber(const json& j, const char* key, double* out) {
  const auto it = j.find(key);
  return it != j.end() && wireNumberFrom(*it, out);
}

bool readCount(const json& j, const char* key, std::int64_t high, std::int64_t* out) {
  bool ok = true;
  *out = wireInt(j, key, 0, high, &ok);
  return ok;
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
