#include "common/OutputFile.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace hookscope {

namespace {

std::string kindOf(const struct stat& st) {
  if (S_ISREG(st.st_mode)) return "a file";
  if (S_ISDIR(st.st_mode)) return "a folder";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISFIFO(st.st_mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "a special file";
}

} // namespace

std::string describeFileAt(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return "";
  if (!S_ISLNK(st.st_mode)) return kindOf(st);
  struct stat target {};
  if (::stat(path.c_str(), &target) != 0) return "a symbolic link to nothing";
  return "a symbolic link to " + kindOf(target);
}

std::string checkOutputFile(const std::string& path, bool replace, const std::string& flag) {
  if (path.empty()) return "no file named to write";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return "cannot look at " + path + ": " + std::strerror(errno);
    struct stat link {};
    if (::lstat(path.c_str(), &link) == 0) {
      return path + " is a symbolic link to nothing: HookScope will not write through it. Name another file.";
    }
    std::filesystem::path folder = std::filesystem::path(path).parent_path();
    if (folder.empty()) folder = ".";
    if (::access(folder.c_str(), W_OK) != 0) {
      return "cannot write into " + folder.string() + ": " + std::strerror(errno) +
             ". Check that the folder exists and is writable, or name another file.";
    }
    return "";
  }
  const std::string what = describeFileAt(path);
  if (!S_ISREG(st.st_mode)) {
    return path + " is " + what + ", not a regular file: HookScope writes only regular files and never replaces "
                  "anything else, even with " + flag + ". Name another file.";
  }
  if (!replace) return path + " exists: replace it with " + flag + ", or name another file.";
  return "";
}

std::string checkOutputOutsideInputs(const std::string& path, const std::vector<std::string>& inputs) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return "";
  const auto file = std::filesystem::weakly_canonical(path, ec);
  if (ec) return "";
  for (const auto& input : inputs) {
    const auto folder = std::filesystem::weakly_canonical(input, ec);
    if (ec) continue;
    const auto [end, rest] = std::mismatch(folder.begin(), folder.end(), file.begin(), file.end());
    if (end == folder.end()) {
      return path + " is a file of " + input + ", which this command reads: write it elsewhere (--force never "
                    "replaces a file of the run being read).";
    }
  }
  return "";
}

} // namespace hookscope
