#include "common/CsvFormat.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace hookscope {

std::string formatDouble(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

std::string csvField(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

std::vector<std::string> splitCsvLine(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else if (c != '\r') {
      fields.back() += c;
    }
  }
  return fields;
}

// strtod, not std::stod: stod refuses a subnormal as out of range (9.99e-321 in stats.csv).
double parseCsvDouble(const std::string& text) {
  if (text == "nan" || text == "-nan") return std::nan("");
  if (text == "inf") return INFINITY;
  if (text == "-inf") return -INFINITY;
  if (text.empty() || text.find_first_not_of("0123456789.eE+-") != std::string::npos) {
    throw std::invalid_argument("not a number");
  }
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || (errno == ERANGE && std::isinf(value))) {
    throw std::out_of_range("not a double");
  }
  return value;
}

bool nextCsvRecord(std::istream& in, std::string* record, int* lines) {
  if (!std::getline(in, *record)) return false;
  ++*lines;
  std::string more;
  auto quotes = std::count(record->begin(), record->end(), '"');
  // An unbalanced quote (a damaged file) joins no more than a MiB: that row is then damaged.
  while (quotes % 2 == 1 && record->size() < (1u << 20) && std::getline(in, more)) {
    ++*lines;
    quotes += std::count(more.begin(), more.end(), '"');
    *record += '\n';
    *record += more;
  }
  return true;
}

} // namespace hookscope
