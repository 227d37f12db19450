#pragma once

#include <string>
#include <vector>

namespace hookscope {

/// One thing in a model's TorchScript code that runs when the file is opened or a step runs
/// and reaches outside the process (files, the console, threads, operator libraries).
struct ArchiveFinding {
  std::string file;  ///< the code record, e.g. "code/__torch__.py"
  int line = 0;      ///< 1-based
  std::string what;  ///< what it does, for a person deciding whether to open the model
  std::string code;  ///< the line itself, trimmed
};

/// Scans one TorchScript source text. `loadedNamespaces` are operator namespaces of libraries
/// the user loaded on purpose: their operators are not findings.
std::vector<ArchiveFinding> scanModelCode(const std::string& file, const std::string& text,
                                          const std::vector<std::string>& loadedNamespaces = {});

/// Reads every code record of a TorchScript archive (text, no code runs) and scans it; false
/// with `error` when the archive cannot be read.
bool scanModelArchive(const std::string& path, std::vector<ArchiveFinding>* findings, std::string* error);

/// The findings as lines for a message ("code/__torch__.py:12: torch.from_file maps ...").
std::string describeFindings(const std::vector<ArchiveFinding>& findings, std::size_t maxLines = 12);

} // namespace hookscope
