#pragma once
// Where an export folder may be written, and how it replaces an earlier one without a moment
// in which neither exists. Plain file-system code, no LibTorch.

#include <memory>
#include <filesystem>
#include <string>
#include <vector>

namespace hookscope {

/// The files an export folder holds (not all of them in every export); nothing else is HookScope's.
const std::vector<std::string>& exportFileNames();

/// True when `dir` holds a HookScope export: a regular manifest.json whose "format" says so.
bool isHookScopeExport(const std::string& dir);

/// "" when an export may be written to `dir`, else why not and what to do. Only an empty or
/// missing folder, or (with `overwrite`) a HookScope export, may become an export: any other
/// folder is refused, with or without overwrite.
std::string checkExportTarget(const std::string& dir, bool overwrite);

/// Where this process writes an export to `target` (an exportTargetPath) before moving it in:
/// ".NAME.hookscope-tmp-PID" beside it, the name recoverInterruptedWrites looks for.
std::string temporaryExportPath(const std::string& target);

/// Tidies what an interrupted write to `dir` left beside it, by processes no longer running:
/// an incomplete folder is removed; an earlier export set aside by an older HookScope is moved
/// back when `dir` is missing. One line per thing done, or found and left (a live writer's).
std::vector<std::string> recoverInterruptedWrites(const std::string& dir);

/// Moves the complete folder `temp` to `target`. An existing `target` is swapped atomically
/// (renameat2 RENAME_EXCHANGE) and then removed, so `target` always holds a complete export;
/// where the file system cannot swap, the old folder is set aside first. False with a message
/// (the real error) on failure, `target` unchanged.
bool moveIntoPlace(const std::string& temp, const std::string& target, std::string* error);

/// The right to write one export folder, from before a run until its export is written: a
/// second writer to the same folder is refused at once instead of after its whole run.
class ExportLock {
public:
  /// Null with a message when another process holds the folder or the lock cannot be made.
  static std::unique_ptr<ExportLock> acquire(const std::string& dir, std::string* error);
  ~ExportLock();
  ExportLock(const ExportLock&) = delete;
  ExportLock& operator=(const ExportLock&) = delete;

private:
  ExportLock(std::string path, int fd) : m_path(std::move(path)), m_fd(fd) {}
  std::string m_path;
  int m_fd;
};

/// The absolute, normalized path an export to `dir` is written to ("." becomes the folder's name).
std::string exportTargetPath(const std::string& dir);

/// Why an export named `target` cannot be written when its name (with HookScope's temporary or
/// lock prefix) is longer than the file system allows: the name, not its folder, is the problem.
std::string nameTooLong(const std::filesystem::path& target);

} // namespace hookscope
