#include "model/ModelArchiveScan.h"

#include "common/FileLimits.h"
#include "model/OperatorLibraries.h"

#include <caffe2/serialize/inline_container.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

namespace hookscope {

namespace {

// Patterns of TorchScript's serialized code, and what each means for the user's machine.
struct Pattern {
  const char* text;
  const char* what;
};
constexpr Pattern kPatterns[] = {
    {"def __setstate__(", "__setstate__ runs code while the file is being opened"},
    {"torch.from_file(", "torch.from_file maps a file of your disk into memory (with shared=True, writes to it)"},
    {"torch.load(", "torch.load reads a file of your disk"},
    {"torch.save(", "torch.save writes a file on your disk"},
    {"print(", "print writes to the console"},
    {"torch.classes.", "uses a class from a native library"},
    {"fork(", "starts work on another thread (fork)"},
};

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t\r");
  if (first == std::string::npos) return "";
  const auto last = s.find_last_not_of(" \t\r");
  return s.substr(first, last - first + 1);
}

// The operator namespace after "torch.ops." at `at`, e.g. "torchvision".
std::string namespaceAt(const std::string& line, std::size_t at) {
  if (at >= line.size()) return "";  // "ops.ns" at the very end of a line
  std::size_t end = at;
  while (end < line.size() && (std::isalnum(static_cast<unsigned char>(line[end])) || line[end] == '_')) ++end;
  return line.substr(at, end - at);
}

} // namespace

std::vector<ArchiveFinding> scanModelCode(const std::string& file, const std::string& text,
                                          const std::vector<std::string>& loadedNamespaces) {
  std::vector<ArchiveFinding> findings;
  std::size_t start = 0;
  int number = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    ++number;
    start = end + 1;
    for (const auto& pattern : kPatterns) {
      if (line.find(pattern.text) != std::string::npos) findings.push_back({file, number, pattern.what, trim(line)});
    }
    // Serialized code calls them "ops.NS.name(...)" (source code "torch.ops.NS.name").
    const std::string ops = "ops.";
    for (std::size_t at = line.find(ops); at != std::string::npos; at = line.find(ops, at + 1)) {
      if (at > 0 && (std::isalnum(static_cast<unsigned char>(line[at - 1])) || line[at - 1] == '_')) continue;
      // "__torch__.torchvision.ops.misc.Conv2dNormActivation" is a class path (a Python module
      // compiled into the file), not a call of an operator: only "ops." or "torch.ops." start one.
      if (at > 0 && line[at - 1] == '.' && !(at >= 6 && line.compare(at - 6, 6, "torch.") == 0 &&
                                              (at == 6 || !(std::isalnum(static_cast<unsigned char>(line[at - 7])) ||
                                                            line[at - 7] == '_' || line[at - 7] == '.')))) {
        continue;
      }
      const std::string ns = namespaceAt(line, at + ops.size());
      if (ns == "aten" || ns == "prim" || ns.empty()) continue;
      if (std::find(loadedNamespaces.begin(), loadedNamespaces.end(), ns) != loadedNamespaces.end()) continue;
      const std::string op = ns + "::" + namespaceAt(line, at + ops.size() + ns.size() + 1);
      findings.push_back({file, number,
                          "calls " + op + ", native code of a library you have not loaded: if you trust it, load it "
                          "with --load-library (in the window: Settings > Operator libraries)",
                          trim(line)});
    }
  }
  return findings;
}

bool scanModelArchive(const std::string& path, std::vector<ArchiveFinding>* findings, std::string* error) {
  findings->clear();
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    std::uint64_t inflated = 0;
    const auto records = reader.getAllRecords();
    for (const auto& name : records) inflated += reader.getRecordSize(name);
    std::error_code ec;
    if (std::string problem = checkInflatedSize(path, std::filesystem::file_size(path, ec), inflated); !problem.empty()) {
      if (error) *error = problem;
      return false;
    }
    std::vector<std::string> loaded;
    for (const auto& library : operatorLibraries()) loaded.insert(loaded.end(), library.namespaces.begin(), library.namespaces.end());
    for (const auto& name : records) {
      // Code lives in code/**.py; the .debug_pkl beside it only maps lines to the original source.
      if (name.rfind("code/", 0) != 0 || name.size() < 3 || name.compare(name.size() - 3, 3, ".py") != 0) continue;
      auto [data, size] = reader.getRecord(name);
      const std::string text(static_cast<const char*>(data.get()), size);
      for (auto& finding : scanModelCode(name, text, loaded)) findings->push_back(std::move(finding));
    }
  } catch (const std::exception& e) {
    if (error) *error = std::string("cannot read the archive: ") + e.what();
    return false;
  }
  return true;
}

std::string describeFindings(const std::vector<ArchiveFinding>& findings, std::size_t maxLines) {
  std::string text;
  for (std::size_t i = 0; i < findings.size() && i < maxLines; ++i) {
    const auto& f = findings[i];
    text += "  " + f.file + ":" + std::to_string(f.line) + ": " + f.what + "\n      " + f.code.substr(0, 120) + "\n";
  }
  if (findings.size() > maxLines) text += "  … and " + std::to_string(findings.size() - maxLines) + " more\n";
  return text;
}

} // namespace hookscope
