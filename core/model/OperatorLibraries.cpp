#include "model/OperatorLibraries.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/version.h>

#include <dlfcn.h>

#include <filesystem>
#include <mutex>
#include <regex>
#include <set>

namespace hookscope {

namespace {

std::mutex g_mutex;
std::vector<OperatorLibrary> g_libraries;

std::vector<std::string> bundledPaths() {
  std::vector<std::string> paths;
#ifdef HOOKSCOPE_OPERATOR_LIBRARIES
  const std::string list = HOOKSCOPE_OPERATOR_LIBRARIES;
  std::size_t start = 0;
  while (start < list.size()) {
    const auto end = list.find(';', start);
    paths.push_back(list.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
#endif
  return paths;
}

// Namespaces of every registered operator ("aten", "prim", "torchvision"...).
std::set<std::string> operatorNamespaces() {
  std::set<std::string> namespaces;
  for (const auto& op : c10::Dispatcher::singleton().getAllOpNames()) {
    const auto colon = op.name.find("::");
    if (colon != std::string::npos) namespaces.insert(op.name.substr(0, colon));
  }
  return namespaces;
}

} // namespace

bool loadOperatorLibrary(const std::string& path, std::string* error) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (const auto& loaded : g_libraries) {
      if (loaded.loaded && loaded.path == path) return true;
    }
  }
  OperatorLibrary library{path, false, "", {}};
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    library.error = "No operator library at " + path + ": give the path of a shared library "
                    "(.so) that registers operators with TORCH_LIBRARY.";
  } else {
    // What it registers is what it adds: a model's calls into it are the user's choice.
    const std::set<std::string> before = operatorNamespaces();
    if (!dlopen(std::filesystem::absolute(path).c_str(), RTLD_NOW | RTLD_GLOBAL)) {
      // RTLD_GLOBAL, as torch.ops.load_library: a library may need another one's symbols.
      const char* reason = dlerror();
      library.error = "Cannot load the operator library " + path + ": " +
                      std::string(reason ? reason : "unknown reason") +
                      ". It must be built for PyTorch " + linkedTorchVersion() +
                      ", the version HookScope is built on.";
    } else {
      library.loaded = true;
      for (const auto& ns : operatorNamespaces()) {
        if (!before.count(ns)) library.namespaces.push_back(ns);
      }
    }
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  g_libraries.push_back(library);
  if (!library.loaded && error) *error = library.error;
  return library.loaded;
}

const std::vector<OperatorLibrary>& loadBundledOperatorLibraries() {
  static const std::vector<OperatorLibrary> bundled = [] {
    std::vector<OperatorLibrary> result;
    for (const auto& path : bundledPaths()) {
      std::string error;
      const bool ok = loadOperatorLibrary(path, &error);
      result.push_back({path, ok, error, {}});
    }
    return result;
  }();
  return bundled;
}

std::vector<OperatorLibrary> operatorLibraries() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_libraries;
}

std::string linkedTorchVersion() { return TORCH_VERSION; }

std::string explainMissingOperator(const std::string& torchError) {
  static const std::regex unknown(R"(Unknown (?:builtin op|type|custom class):? ([A-Za-z_]\w*(?:\.\w+)*::\w+(?:\.\w+)*))");
  std::smatch match;
  if (!std::regex_search(torchError, match, unknown)) return "";
  const std::string op = match[1];
  const std::string ns = op.substr(0, op.find("::"));
  if (ns == "aten" || ns == "prim" || ns == "__torch__") {
    return "The model uses " + op + ", which PyTorch " + linkedTorchVersion() +
           " (the version HookScope is built on) does not have: the file was probably saved by "
           "a newer PyTorch. Save it with PyTorch " + linkedTorchVersion() +
           ", or build HookScope on the PyTorch that saved it (HOOKSCOPE_PYTHON=/path/to/"
           "python scripts/build.sh).";
  }
  std::string provider = "the library that registers the " + ns + "::* operators";
  if (ns == "torchvision") {
    provider = "torchvision's operator library (torchvision/_C.so of a torchvision built for "
               "PyTorch " + linkedTorchVersion() + ")";
  }
  return "The model uses the operator " + op + ", which no loaded library provides. It comes "
         "from " + provider + ": load it with --load-library PATH (hookscope-cli) or "
         "Settings > Operator libraries (window), then open the model again.";
}

} // namespace hookscope
