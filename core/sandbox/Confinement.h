#pragma once
// Confines the process that runs a model file, so that code in the file (a TorchScript
// `__setstate__`, an operator it calls) cannot write to the user's files, start programs,
// open network connections or signal other processes. Linux only: Landlock for files and TCP,
// seccomp (Debian's libseccomp) for the system calls.

#include <string>
#include <vector>

namespace hookscope {

/// What confineProcess() put in place.
struct Confinement {
  int landlockAbi = 0;  ///< the kernel's Landlock version (0: none: files are not confined)
  bool seccomp = false;
  std::vector<std::string> writable;  ///< folders beneath which files may still be written
  /// One line for the user: "no file writes (Landlock 7), no programs, processes or network (seccomp)".
  std::string describe() const;
};

/// Confines this process for good: from here on no file may be written, created, removed or
/// executed (/dev/null and what lies beneath `writableFolders` excepted), no TCP bound or
/// connected (Landlock), and no program started, no process forked, no socket made or
/// connected, no other process signalled or traced (seccomp). Sockets and files already open
/// stay usable. False with a message when the kernel refuses seccomp; a kernel without Landlock
/// leaves files unconfined (landlockAbi 0).
bool confineProcess(Confinement* done, std::string* error, const std::vector<std::string>& writableFolders = {});

} // namespace hookscope
