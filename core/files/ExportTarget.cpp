#include "files/ExportTarget.h"

#include "common/FileLimits.h"
#include "common/OutputFile.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

namespace hookscope {

namespace fs = std::filesystem;

namespace {

// ".NAME.hookscope-KIND-" : the prefix of what a write to NAME leaves beside it.
std::string leftoverPrefix(const fs::path& target, const char* kind) {
  return "." + target.filename().string() + ".hookscope-" + kind + "-";
}

bool processRuns(long pid) { return pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno == EPERM); }

// The pid at the end of a leftover's name, or -1 when the rest is not a number.
long pidSuffix(const std::string& name, const std::string& prefix) {
  const std::string rest = name.substr(prefix.size());
  if (rest.empty() || rest.size() > 9 || rest.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stol(rest);
}

std::string errnoText(int code) { return std::strerror(code); }

} // namespace

std::string exportTargetPath(const std::string& dir) {
  std::error_code ec;
  // Lexical, so a symbolic link stays one (and is refused) rather than being followed.
  fs::path target = fs::absolute(fs::path(dir), ec).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();
  return target.string();
}

const std::vector<std::string>& exportFileNames() {
  static const std::vector<std::string> names = {"manifest.json", "stats.csv",  "scalars.csv",
                                                 "histograms.pt", "alerts.csv", "tensors.pt"};
  return names;
}

bool isHookScopeExport(const std::string& dir) {
  std::error_code ec;
  const fs::path manifest = fs::path(dir) / "manifest.json";
  if (!checkRegularFile(manifest.string(), "manifest.json").empty()) return false;
  const auto size = fs::file_size(manifest, ec);
  if (ec || size > kManifestMaxBytes) return false;
  std::ifstream in(manifest, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!checkJsonDepth(text).empty()) return false;
  const auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  return json.is_object() && json.value("format", std::string()) == "hookscope-capture";
}

std::string checkExportTarget(const std::string& dir, bool overwrite) {
  if (dir.empty()) return "no export folder given";
  std::error_code ec;
  const fs::path target(exportTargetPath(dir));
  const auto status = fs::symlink_status(target, ec);
  if (fs::is_symlink(status)) {
    return dir + " is a symbolic link: give the export folder's real path.";
  }
  if (fs::exists(status) && !fs::is_directory(status)) {
    return dir + " exists and is " + describeFileAt(target.string()) +
           ", not a folder: HookScope will not replace it, even with --force. Choose another export folder.";
  }
  if (!fs::is_directory(status) || fs::is_empty(target, ec)) {
    const fs::path parent = target.parent_path();
    fs::path existing = parent;
    while (!existing.empty() && !fs::exists(existing, ec)) existing = existing.parent_path();
    if (!existing.empty() && ::access(existing.c_str(), W_OK) != 0) {
      return "cannot write into " + existing.string() + ": " + errnoText(errno) + ". Choose a folder you can write to.";
    }
    return "";
  }
  if (!isHookScopeExport(target.string())) {
    return dir + " is not empty and is not a HookScope export (it has no manifest.json of one), so "
                 "HookScope will not replace it, with or without --force. Choose a new or empty folder.";
  }
  if (!overwrite) {
    return "export folder " + dir + " already holds a HookScope export: choose another folder, "
           "or replace it (--force in hookscope-cli).";
  }
  // Replacing an export replaces only what HookScope wrote: a folder that also holds the user's
  // own files (notes, a sub-folder, a manifest.json merely claiming to be an export beside a
  // thesis) is refused, naming them, rather than emptied.
  const auto& exportFiles = exportFileNames();
  std::vector<std::string> foreign;
  for (const auto& entry : fs::directory_iterator(target, ec)) {
    const std::string name = entry.path().filename().string();
    std::error_code typeError;
    const bool file = entry.is_regular_file(typeError) && !entry.is_symlink(typeError);
    const bool ours = file && std::find(exportFiles.begin(), exportFiles.end(), name) != exportFiles.end();
    if (!ours) foreign.push_back(name + (entry.is_directory(typeError) ? "/" : ""));
  }
  if (ec) return "cannot list " + dir + ": " + ec.message() + ". Choose another export folder.";
  if (!foreign.empty()) {
    std::sort(foreign.begin(), foreign.end());
    std::string names;
    for (std::size_t i = 0; i < foreign.size() && i < 8; ++i) names += (i ? ", " : "") + foreign[i];
    if (foreign.size() > 8) names += " and " + std::to_string(foreign.size() - 8) + " more";
    return dir + " holds " + names + " beside the export, which HookScope did not write and will not delete, even "
           "with --force. Move " + (foreign.size() == 1 ? "it" : "them") + " out of the folder, or choose another "
           "export folder.";
  }
  const fs::path cwd = fs::current_path(ec);
  if (!ec) {
    const auto rel = cwd.lexically_relative(target);
    if (!rel.empty() && *rel.begin() != "..") {
      return "cannot replace " + dir + ": it holds the current folder. Run from another folder, "
                                       "or export somewhere else.";
    }
  }
  return "";
}

std::string temporaryExportPath(const std::string& target) {
  const fs::path path(target);
  return (path.parent_path() / (leftoverPrefix(path, "tmp") + std::to_string(::getpid()))).string();
}

std::vector<std::string> recoverInterruptedWrites(const std::string& dir) {
  std::vector<std::string> notes;
  std::error_code ec;
  const fs::path target(exportTargetPath(dir));
  const fs::path parent = target.parent_path();
  if (!fs::is_directory(parent, ec)) return notes;
  const std::string tmpPrefix = leftoverPrefix(target, "tmp");
  const std::string oldPrefix = leftoverPrefix(target, "old");
  for (const auto& entry : fs::directory_iterator(parent, ec)) {
    const std::string name = entry.path().filename().string();
    // A lock file of any export here that no process holds: its writer was killed (SIGKILL, a
    // second Ctrl+C) before it could remove it. The lock itself died with that process.
    const std::string lockSuffix = ".hookscope-lock-file";
    if (name.size() > lockSuffix.size() && name[0] == '.' &&
        name.compare(name.size() - lockSuffix.size(), lockSuffix.size(), lockSuffix) == 0 &&
        fs::is_regular_file(fs::symlink_status(entry.path(), ec))) {
      const int fd = ::open(entry.path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
      if (fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) == 0) {  // free: no writer holds it (ours is held)
        ::unlink(entry.path().c_str());
        notes.push_back("removed " + entry.path().string() + ", a lock left by a HookScope write that was killed");
      }
      if (fd >= 0) ::close(fd);
      continue;
    }
    const bool tmp = name.rfind(tmpPrefix, 0) == 0;
    const bool old = name.rfind(oldPrefix, 0) == 0;
    if (!tmp && !old) continue;
    const long pid = pidSuffix(name, tmp ? tmpPrefix : oldPrefix);
    if (pid < 0 || !fs::is_directory(fs::symlink_status(entry.path(), ec))) continue;
    if (pid == long(::getpid())) continue;
    if (processRuns(pid)) {
      notes.push_back(entry.path().string() + " belongs to a HookScope write still running (pid " +
                      std::to_string(pid) + "); left alone");
      continue;
    }
    std::error_code op;
    if (old && !fs::exists(target, op) && isHookScopeExport(entry.path().string())) {
      fs::rename(entry.path(), target, op);
      notes.push_back(op ? "could not restore the earlier export from " + entry.path().string() + ": " + op.message()
                         : "restored the earlier export " + target.string() + " from " + entry.path().string() +
                               ", which an interrupted write had set aside");
      continue;
    }
    fs::remove_all(entry.path(), op);
    notes.push_back(op ? "could not remove " + entry.path().string() + ", left by an interrupted write: " + op.message()
                       : "removed " + entry.path().string() + ", left by an interrupted write (pid " +
                             std::to_string(pid) + ")");
  }
  return notes;
}

bool moveIntoPlace(const std::string& temp, const std::string& target, std::string* error) {
  auto fail = [&](const std::string& message) {
    if (error) *error = message;
    return false;
  };
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(target, ec))) {
    if (::rename(temp.c_str(), target.c_str()) != 0) {
      return fail("cannot move the export into " + target + ": " + errnoText(errno));
    }
    return true;
  }
  if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(temp, ec);  // now the earlier export
    return true;
  }
  const int swapError = errno;
  if (swapError != EINVAL && swapError != ENOSYS) {
    return fail("cannot replace " + target + ": " + errnoText(swapError));
  }
  // A file system without RENAME_EXCHANGE: set the old folder aside, then move the new one in.
  const fs::path path(target);
  const fs::path old = path.parent_path() / (leftoverPrefix(path, "old") + std::to_string(::getpid()));
  if (::rename(target.c_str(), old.c_str()) != 0) {
    return fail("cannot replace " + target + ": " + errnoText(errno));
  }
  if (::rename(temp.c_str(), target.c_str()) != 0) {
    const int code = errno;
    ::rename(old.c_str(), target.c_str());
    return fail("cannot move the export into " + target + ": " + errnoText(code));
  }
  fs::remove_all(old, ec);
  return true;
}

std::string nameTooLong(const std::filesystem::path& target) {
  return "the name " + target.filename().string() + " is too long: with the prefix of HookScope's temporary and lock " +
         "files beside it, it passes the file system's limit (usually 255 bytes); choose a shorter name";
}

std::unique_ptr<ExportLock> ExportLock::acquire(const std::string& dir, std::string* error) {
  const fs::path target(exportTargetPath(dir));
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  const std::string path = (target.parent_path() / leftoverPrefix(target, "lock")).string() + "file";
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
      if (error) *error = errno == ENAMETOOLONG ? nameTooLong(target) : "cannot write into " + target.parent_path().string() + ": " + errnoText(errno);
      return nullptr;
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);
      if (error) {
        *error = "another HookScope process is writing the export " + dir + " (it holds " + path +
                 "): wait for it to finish, or choose another folder.";
      }
      return nullptr;
    }
    // The holder before us may have removed the file after we opened it: lock the file that is there.
    struct stat held {}, current {};
    if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &current) == 0 && held.st_ino == current.st_ino &&
        held.st_dev == current.st_dev) {
      return std::unique_ptr<ExportLock>(new ExportLock(path, fd));
    }
    ::close(fd);
  }
  if (error) *error = "cannot take the lock " + path + ": it keeps changing";
  return nullptr;
}

ExportLock::~ExportLock() {
  ::unlink(m_path.c_str());
  ::close(m_fd);
}

} // namespace hookscope
