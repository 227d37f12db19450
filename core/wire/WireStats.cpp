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

// What a count read as none holds (missing, not a whole number, negative): over every bound.
constexpr std::int64_t kNoCount = std::numeric_limits<std::int64_t>::max();

std::int64_t jsonCount(const json& j, const char* key) {
  bool ok = true;
  const auto value = wireInt(j, key, 0, kNoCount, &ok);
  return ok ? value : kNoCount;
}

std::int64_t rowCount(double v) {
  return v >= 0 && v <= 0x1p62 && v == std::floor(v) ? std::int64_t(v) : kNoCount;
}

// amax and the counts, which a script of an older package does not send: absent, the stats say
// "not measured" (checkStats then skips them); present, every one must be there.
void precisionFromWire(const json& j, TensorStats& s) {
  if (!j.contains("amax") && !j.contains("f16_overflow")) return;
  for (const auto& field : kPrecisionFields) s.*field.count = jsonCount(j, field.name);
  if (!readNumber(j, "amax", &s.amax)) s.amax = -1;  // missing: refused as negative
}

// What a capture's statistics must hold once read, from a stats entry or a stats row (`what`):
// counts within their tensor, amax, the zero fraction, the histogram's total and edges.
bool checkStats(const TensorStats& s, const char* what, std::string* error) {
  auto fail = [&](const std::string& text) {
    *error = what + text;
    return false;
  };
  if (s.nanCount < 0 || s.infCount < 0 || s.nanCount > s.numel || s.infCount > s.numel - s.nanCount) {
    return fail("'s NaN or Inf count is missing or over its numel");
  }
  if (s.hasPrecision()) {
    const std::int64_t finite = s.numel - s.nanCount - s.infCount;
    for (const auto& field : kPrecisionFields) {
      if (s.*field.count < 0 || s.*field.count > finite) {
        return fail("'s " + std::string(field.name) + " is missing or over its finite values");
      }
    }
    if (!(std::isnan(s.amax) || s.amax >= 0)) return fail("'s amax is missing or negative");
  }
  if (!(s.zeroFraction >= 0 && s.zeroFraction <= 1)) return fail("'s zero fraction is outside [0, 1]");
  std::int64_t total = 0;
  for (const std::int64_t count : s.histogram) {
    if (count < 0 || count > s.numel - total) return fail("'s histogram counts more values than the tensor holds");
    total += count;
  }
  if (!s.histogram.empty() && !(std::isfinite(s.histLow) && std::isfinite(s.histHigh) && s.histLow <= s.histHigh)) {
    return fail("'s histogram edges are not finite and ordered");
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
  s.nanCount = jsonCount(j, "nan");
  s.infCount = jsonCount(j, "inf");
  precisionFromWire(j, s);
  const auto hist = j.find("hist");
  if (hist == j.end() || !hist->is_array() || hist->size() > kMaxWireBins) {
    *error = "a stats entry has no histogram (or over " + std::to_string(kMaxWireBins) + " bins)";
    return false;
  }
  for (const auto& count : *hist) s.histogram.push_back(count.is_number_integer() ? count.get<std::int64_t>() : kNoCount);
  if (!checkStats(s, "a stats entry", error)) return false;
  *out = std::move(s);
  return true;
}

bool statsFromRow(const double* row, std::size_t bins, TensorStats* stats, std::string* error) {
  using namespace ::hookscope::row;
  TensorStats& s = *stats;
  s.min = row[kMin];
  s.max = row[kMax];
  s.mean = row[kMean];
  s.std = row[kStd];
  s.l2norm = row[kL2];
  s.zeroFraction = row[kZeros];
  s.nanCount = rowCount(row[kNan]);
  s.infCount = rowCount(row[kInf]);
  s.histLow = row[kLo];
  s.histHigh = row[kHi];
  s.amax = row[kAmax];
  s.f16Overflow = rowCount(row[kF16Overflow]);  // always sent in a row: never "not measured"
  s.f16Underflow = rowCount(row[kF16Underflow]);
  s.e4m3Underflow = rowCount(row[kE4m3Underflow]);
  s.e5m2Underflow = rowCount(row[kE5m2Underflow]);
  s.histogram.resize(bins);
  for (std::size_t i = 0; i < bins; ++i) s.histogram[i] = rowCount(row[kRowHeader + i]);
  return checkStats(s, "a stats row", error);
}

} // namespace hookscope
