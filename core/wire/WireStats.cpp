#include "wire/WireStats.h"

#include "wire/WireJson.h"

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

namespace {

// The low-precision counts by their wire names (docs/protocol.md).
struct PrecisionField {
  const char* name;
  std::int64_t TensorStats::*count;
};
constexpr PrecisionField kPrecisionFields[] = {{"f16_overflow", &TensorStats::f16Overflow},
                                               {"f16_underflow", &TensorStats::f16Underflow},
                                               {"e4m3_underflow", &TensorStats::e4m3Underflow},
                                               {"e5m2_underflow", &TensorStats::e5m2Underflow}};

// amax and the counts, which a script of an older package does not send: absent, the stats say
// "not measured"; present, every one is there and no count exceeds the finite values.
bool precisionFromWire(const json& j, TensorStats& s, std::string* error) {
  if (!j.contains("amax") && !j.contains("f16_overflow")) return true;
  const std::int64_t finite = s.numel - s.nanCount - s.infCount;
  for (const auto& field : kPrecisionFields) {
    if (!readCount(j, field.name, finite, &(s.*field.count))) {
      *error = std::string("a stats entry's ") + field.name + " is missing or over its finite values";
      return false;
    }
  }
  if (!readNumber(j, "amax", &s.amax) || !(std::isnan(s.amax) || s.amax >= 0)) {
    *error = "a stats entry's amax is missing or negative";
    return false;
  }
  return true;
}

} // namespace

json statsToWire(const TensorStats& s) {
  json j = {{"shape", s.shape},
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
  if (s.hasPrecision()) {
    j["amax"] = wireNumberJson(s.amax);
    for (const auto& field : kPrecisionFields) j[field.name] = s.*field.count;
  }
  return j;
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
  if (!precisionFromWire(j, s, error)) return false;
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

bool statsFromRow(const double* row, std::size_t bins, TensorStats* stats, std::string* error) {
  TensorStats& s = *stats;
  const double numel = double(s.numel);
  // A count: a whole number from 0 to `high` (NaN fails every comparison).
  auto count = [](double v, double high, std::int64_t* out) {
    if (!(v >= 0 && v <= high) || v != std::floor(v)) return false;
    *out = std::int64_t(v);
    return true;
  };
  s.min = row[0];
  s.max = row[1];
  s.mean = row[2];
  s.std = row[3];
  s.l2norm = row[4];
  s.zeroFraction = row[5];
  s.histLow = row[8];
  s.histHigh = row[9];
  s.amax = row[10];
  if (!count(row[6], numel, &s.nanCount) || !count(row[7], numel, &s.infCount) || s.nanCount + s.infCount > s.numel) {
    *error = "a stats row's NaN or Inf count is not a count within its numel";
    return false;
  }
  const double finite = double(s.numel - s.nanCount - s.infCount);
  if (!count(row[11], finite, &s.f16Overflow) || !count(row[12], finite, &s.f16Underflow) ||
      !count(row[13], finite, &s.e4m3Underflow) || !count(row[14], finite, &s.e5m2Underflow)) {
    *error = "a stats row's low-precision counts are not counts within its finite values";
    return false;
  }
  if (!(std::isnan(s.amax) || s.amax >= 0) || !(s.zeroFraction >= 0 && s.zeroFraction <= 1)) {
    *error = "a stats row's amax is negative or its zero fraction outside [0, 1]";
    return false;
  }
  s.histogram.resize(bins);
  std::int64_t total = 0;
  for (std::size_t i = 0; i < bins; ++i) {
    if (!count(row[kRowHeader + i], numel - double(total), &s.histogram[i])) {
      *error = "a stats row's histogram counts more values than the tensor holds";
      return false;
    }
    total += s.histogram[i];
  }
  if (bins > 0 && !(std::isfinite(s.histLow) && std::isfinite(s.histHigh) && s.histLow <= s.histHigh)) {
    *error = "a stats row's histogram edges are not finite and ordered";
    return false;
  }
  return true;
}

} // namespace hookscope
