#include "cli/CliCommands.h"

#include "common/InputSpec.h"

#include <CLI/CLI.hpp>

#include <fnmatch.h>

namespace hookscope::cli {

const char* const kLibraryHelp =
    "shared library of TorchScript operators to load first, like torch.ops.load_library "
    "(repeatable): for a model that uses operators outside PyTorch itself, e.g. torchvision's "
    "_C.so for torchvision::nms. torchvision's beside the linked PyTorch is loaded by itself.";
const char* const kPythonHelp = "Python with PyTorch that runs .pt2 and whole-model pickle files (default: "
                                "HOOKSCOPE_PYTHON, else the one HookScope was built with)";
const char* const kPythonPathHelp = "folder to import a pickled model's classes from (repeatable)";

const CLI::Validator& nonEmptyFolder() {
  static const CLI::Validator check(
      [](std::string& value) { return value.empty() ? std::string("an empty name names no folder") : std::string(); },
      "FOLDER");
  return check;
}

bool validateSpecs(const std::vector<std::string>& specs, std::string* message) {
  for (const auto& text : specs) {
    InputSpec spec;
    if (!InputSpec::parse(text, &spec, message)) return false;
  }
  return true;
}

bool matchesPattern(const std::string& pattern, const std::string& path) {
  return ::fnmatch(pattern.c_str(), path.c_str(), 0) == 0;
}

} // namespace hookscope::cli
