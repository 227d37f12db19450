#include "common/CaptureKind.h"

namespace hookscope {

namespace {
constexpr const char* kNames[kCaptureKindCount] = {"activation", "input",      "gradient",
                                                   "param",      "param_grad", "update"};
}

const char* captureKindName(CaptureKind kind) { return kNames[int(kind)]; }

std::optional<CaptureKind> parseCaptureKind(std::string_view name) {
  for (int i = 0; i < kCaptureKindCount; ++i) {
    if (name == kNames[i]) return CaptureKind(i);
  }
  return std::nullopt;
}

std::uint8_t parseKindList(std::string_view list, std::string* error) {
  std::uint8_t mask = 0;
  while (!list.empty()) {
    const auto comma = list.find(',');
    const auto word = list.substr(0, comma);
    if (!word.empty()) {
      const auto kind = parseCaptureKind(word);
      if (!kind) {
        if (error) {
          *error = "unknown capture kind '" + std::string(word) +
                   "'; use activation, input, gradient, param, param_grad or update";
        }
        return 0;
      }
      mask |= kindBit(*kind);
    }
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return mask;
}

std::vector<std::string> captureKindNames(std::uint8_t mask) {
  std::vector<std::string> names;
  for (int i = 0; i < kCaptureKindCount; ++i) {
    if (mask & kindBit(CaptureKind(i))) names.push_back(captureKindName(CaptureKind(i)));
  }
  return names;
}

std::vector<CaptureKind> allCaptureKinds() {
  std::vector<CaptureKind> kinds;
  for (int i = 0; i < kCaptureKindCount; ++i) kinds.push_back(CaptureKind(i));
  return kinds;
}

} // namespace hookscope
