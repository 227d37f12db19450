#include "common/FileLimits.h"

#include <cstdlib>
#include <filesystem>

namespace hookscope {

namespace fs = std::filesystem;

std::uint64_t maxInflateExtraBytes() {
  std::uint64_t mib = 256;
  if (const char* text = std::getenv("HOOKSCOPE_MAX_INFLATE_MIB")) {
    char* end = nullptr;
    const unsigned long long value = std::strtoull(text, &end, 10);
    if (end != text && *end == '\0' && value > 0) mib = value;
  }
  return mib * 1024 * 1024;
}

std::string checkInflatedSize(const std::string& path, std::uint64_t fileBytes, std::uint64_t inflatedBytes) {
  const std::uint64_t limit = fileBytes + maxInflateExtraBytes();
  if (inflatedBytes <= limit) return "";
  const auto mib = [](std::uint64_t bytes) { return std::to_string(bytes / (1024 * 1024)) + " MiB"; };
  return path + " inflates to " + mib(inflatedBytes) + " from " + mib(fileBytes) +
         " on disk. PyTorch stores its records uncompressed, so this file is probably crafted to "
         "exhaust memory; HookScope reads at most " + mib(maxInflateExtraBytes()) +
         " more than a file holds. If you trust it, raise the limit with HOOKSCOPE_MAX_INFLATE_MIB.";
}

std::string checkRegularFile(const std::string& path, const std::string& what) {
  std::error_code ec;
  const auto status = fs::symlink_status(path, ec);
  if (ec || !fs::exists(status)) return what + " is missing";
  if (fs::is_symlink(status)) return what + " is a symbolic link; HookScope reads only regular files in an export";
  if (fs::is_directory(status)) return what + " is a folder, not a file";
  if (!fs::is_regular_file(status)) return what + " is not a regular file (a FIFO, socket or device)";
  return "";
}

std::string checkJsonDepth(const std::string& text) {
  int depth = 0;
  bool inString = false, escaped = false;
  for (const char c : text) {
    if (inString) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        inString = false;
      }
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kJsonMaxDepth) {
        return "nests arrays and objects deeper than " + std::to_string(kJsonMaxDepth) +
               " levels, which HookScope never writes: the file or message is damaged or crafted";
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return "";
}

} // namespace hookscope
