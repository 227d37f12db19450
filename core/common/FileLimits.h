#pragma once
// Limits on what HookScope reads from files it did not write itself: model archives, data
// files and export folders may be damaged or crafted.

#include <cstdint>
#include <string>

namespace hookscope {

/// The largest manifest.json HookScope reads; the ones it writes are far smaller.
constexpr std::uintmax_t kManifestMaxBytes = 16 * 1024 * 1024;

/// How many bytes an archive's records may inflate to beyond the archive's own size:
/// PyTorch stores records uncompressed, so a file that inflates much is crafted. 256 MiB by
/// default; HOOKSCOPE_MAX_INFLATE_MIB raises it.
std::uint64_t maxInflateExtraBytes();

/// "" when the zip archive `path` (`fileBytes` long) whose records add up to `inflatedBytes`
/// stays within the limit above; else a message naming both sizes, the limit and how to raise it.
std::string checkInflatedSize(const std::string& path, std::uint64_t fileBytes, std::uint64_t inflatedBytes);

/// "" when `path` is a regular file, not a link, folder, FIFO or device; else what it is and
/// what to do. `what` names the file for the message ("manifest.json").
std::string checkRegularFile(const std::string& path, const std::string& what);

/// The deepest JSON HookScope reads (manifests, messages on the wire): what it writes nests a
/// few levels; a copy of deeper JSON recurses once a level and could overflow the stack.
constexpr int kJsonMaxDepth = 64;

/// "" when the JSON text's arrays and objects nest at most kJsonMaxDepth deep (brackets inside
/// strings not counted; the text need not be valid JSON, its parser says what else is wrong);
/// else "nests deeper than 64 levels". One pass, no recursion.
std::string checkJsonDepth(const std::string& text);

} // namespace hookscope
