#pragma once
// What HookScope may write a file over: nothing but a regular file it was told it may replace.
// A device (`--out /dev/full`, or /dev/null as root), a FIFO, a socket, a folder, or a link to
// one of them is never replaced, with or without --force.

#include <string>
#include <vector>

namespace hookscope {

/// What is at `path`, in words: "a character device", "a FIFO (named pipe)", "a socket", "a
/// folder", "a file" (a regular one), "a symbolic link to a folder", ...; "" where nothing is.
std::string describeFileAt(const std::string& path);

/// "" when a file may be written at `path`: nothing is there and its folder exists and is
/// writable, or a regular file (or a link to one) is there and `replace` says it may be replaced.
/// Else why not and what to do; `flag` names the option that allows replacing ("--force").
std::string checkOutputFile(const std::string& path, bool replace, const std::string& flag = "--force");

/// "" unless `path` is a file already inside one of the folders `inputs` (the exports a command
/// reads), which no output replaces, even with --force; else what to do.
std::string checkOutputOutsideInputs(const std::string& path, const std::vector<std::string>& inputs);

} // namespace hookscope
