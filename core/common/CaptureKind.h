#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hookscope {

/// What a capture holds: a module's output, its input, the gradient at its output,
/// a parameter, a parameter's gradient, or an optimizer update.
enum class CaptureKind : std::uint8_t { Activation = 0, Input, Gradient, Param, ParamGrad, Update };

constexpr int kCaptureKindCount = 6;

/// Whether series of this kind are named after a parameter ("fc1.weight") instead of a module.
constexpr bool isParameterKind(CaptureKind kind) {
  return kind == CaptureKind::Param || kind == CaptureKind::ParamGrad || kind == CaptureKind::Update;
}

/// One bit per kind, for per-module hook flags.
constexpr std::uint8_t kindBit(CaptureKind kind) { return std::uint8_t(1u << unsigned(kind)); }

/// The kind's name as used in files and on the command line ("activation", "param_grad", ...).
const char* captureKindName(CaptureKind kind);

/// Parses a kind name; nullopt when it names no kind.
std::optional<CaptureKind> parseCaptureKind(std::string_view name);

/// Parses a comma-separated list of kind names into a bit mask; sets `error` on a bad name.
std::uint8_t parseKindList(std::string_view list, std::string* error);

/// The names of the kinds in a bit mask, in declaration order (for manifests and the wire).
std::vector<std::string> captureKindNames(std::uint8_t mask);

/// All kinds in declaration order.
std::vector<CaptureKind> allCaptureKinds();

} // namespace hookscope
