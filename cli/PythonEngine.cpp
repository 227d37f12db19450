// Which engine runs a model file, told from its contents: TorchScript in hookscope-engine
// (LibTorch), a torch.export program or a whole-model pickle in the hookscope package's Python
// engine (python -m hookscope.engine); for a file neither opens, a message that says what it is.

#include "cli/CliCommands.h"
#include "cli/CliSupport.h"
#include "files/ModelFileKind.h"
#include "links/EngineProcess.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace hookscope::cli {

std::string pythonPackageDir() {
  if (const char* dir = std::getenv("HOOKSCOPE_PACKAGE_DIR"); dir && *dir) return dir;
  if (const auto self = programPath(); !self.empty()) {
    const auto installed = self.parent_path() / ".." / "share" / "hookscope" / "python";
    std::error_code ec;
    if (std::filesystem::exists(installed / "hookscope" / "__init__.py", ec)) return installed.lexically_normal();
  }
  return HOOKSCOPE_SOURCE_PYTHON_DIR;
}

std::string packagePythonPath() {
  std::string path = pythonPackageDir();
  if (const char* old = std::getenv("PYTHONPATH"); old && *old) path += std::string(":") + old;
  return path;
}

std::string defaultPython() {
  if (const char* python = std::getenv("HOOKSCOPE_PYTHON"); python && *python) return python;
  return HOOKSCOPE_DEFAULT_PYTHON;
}

namespace {

std::vector<std::string> split(const std::string& text, char by) {
  std::vector<std::string> parts;
  std::string part;
  for (const char c : text) {
    if (c == by) {
      if (!part.empty()) parts.push_back(part);
      part.clear();
    } else {
      part += c;
    }
  }
  if (!part.empty()) parts.push_back(part);
  return parts;
}

}  // namespace

int execEngineFor(const std::string& command, const std::string& model, const PythonEngineOptions& options) {
  ModelFileInfo info;
  std::string message;
  if (!std::filesystem::exists(model)) return execEngine();  // the engine says the file is missing, as before
  if (!identifyModelFile(model, &info, &message)) return error(kModelLoad, message);
  if (info.kind == ModelFileKind::TorchScript) return execEngine();
  // Not a zip archive at all (empty, truncated, text, a legacy torch.save): LibTorch's engine says
  // exactly what is wrong with it.
  if (info.kind == ModelFileKind::Unknown) return execEngine();

  // A .pt2 or a whole-model pickle: the Python engine, in the Python the user named.
  std::vector<std::string> words{command, model};
  if (command == "serve" && !options.address.empty()) words.insert(words.end(), {"--address", options.address});
  for (const auto& input : options.inputs) words.insert(words.end(), {"--input", input});
  if (options.trust) words.push_back("--trust");
  if (!options.confine) words.push_back("--no-confine");
  std::vector<std::string> pythonPath = options.pythonPath;
  if (const char* more = std::getenv("HOOKSCOPE_PYTHON_PATH"); more && *more) {
    for (const auto& dir : split(more, ':')) pythonPath.push_back(dir);
  }
  for (const auto& dir : pythonPath) words.insert(words.end(), {"--python-path", dir});
  return execPythonEngine(options.python, words, std::string(modelFileKindName(info.kind)) + " files run in Python");
}

int execPythonEngine(const std::string& chosen, const std::vector<std::string>& arguments, const std::string& why) {
  const std::string python = !chosen.empty() ? chosen : defaultPython();
  std::vector<std::string> words{python, "-m", "hookscope.engine"};
  words.insert(words.end(), arguments.begin(), arguments.end());
  ::setenv("PYTHONPATH", packagePythonPath().c_str(), 1);
  const int failure = execWords(words);
  return error(kModelLoad, why + ", and " + python + " cannot be started (" + std::strerror(failure) +
                               "): name a Python with PyTorch with --python (or HOOKSCOPE_PYTHON; in the window, "
                               "Settings > Python for model files)");
}

namespace {

pid_t g_engineChild = 0;

// SIGTERM or SIGINT for this process goes on to the engine it waits for, which ends as it would;
// this process then removes the scratch folder.
void forwardSignal(int signo) {
  if (g_engineChild > 0) ::kill(g_engineChild, signo);
}

}  // namespace

int runPythonEngine(const std::string& chosen, const std::vector<std::string>& arguments, const std::string& why) {
  const std::string python = !chosen.empty() ? chosen : defaultPython();
  // The confined engine may write only into this folder and cannot remove it itself: made here,
  // removed here on every exit of the engine.
  std::string message;
  const std::string scratch = makeEngineScratch(&message);
  if (scratch.empty()) return error(kOutput, message);
  ::setenv("PYTHONPATH", packagePythonPath().c_str(), 1);
  ::setenv("HOOKSCOPE_ENGINE_SCRATCH", scratch.c_str(), 1);
  std::vector<std::string> words{python, "-m", "hookscope.engine"};
  words.insert(words.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  struct sigaction forward {}, savedTerm {}, savedInt {};
  forward.sa_handler = forwardSignal;
  ::sigaction(SIGTERM, &forward, &savedTerm);
  ::sigaction(SIGINT, &forward, &savedInt);
  pid_t pid = 0;
  const int spawned = ::posix_spawnp(&pid, python.c_str(), nullptr, nullptr, argv.data(), environ);
  int status = 0;
  if (spawned == 0) {
    g_engineChild = pid;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    g_engineChild = 0;
  }
  ::sigaction(SIGTERM, &savedTerm, nullptr);
  ::sigaction(SIGINT, &savedInt, nullptr);
  std::error_code ec;
  std::filesystem::remove_all(scratch, ec);
  const std::string advice = ": name a Python with PyTorch with --python (or HOOKSCOPE_PYTHON; in the window, "
                             "Settings > Python for model files)";
  if (spawned != 0) return error(kModelLoad, why + ", and " + python + " cannot be started (" + std::strerror(spawned) + ")" + advice);
  if (WIFSIGNALED(status)) {
    return error(kModelLoad, "the Python engine (" + python + ") was ended by signal " + std::to_string(WTERMSIG(status)));
  }
  const int code = WEXITSTATUS(status);
  if (code == 1 || code == 127) {  // Python could not run the engine (not one of the engine's exit codes)
    return error(kMissingTool, python + " could not run hookscope.engine (exit " + std::to_string(code) + ")" + advice);
  }
  return code;
}

}  // namespace hookscope::cli
