#pragma once
// hookscope-cli's subcommands: each is declared (its options and help) next to what runs it, in
// its own file (InspectCommand.cpp, CaptureCommand.cpp, RecordCommand.cpp, ...); main.cpp adds
// them all and runs the one chosen.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
class Validator;
}

namespace hookscope::cli {

/// Exit codes, as documented in `hookscope-cli --help`.
enum ExitCode : int {
  kOk = 0,
  kUsage = 2,
  kModelLoad = 3,
  kData = 4,
  kOutput = 5,
  kBreak = 6,
  kRankLost = 7,  ///< record: a rank of a job left without closing; the export holds what every rank sent
  kMissingTool = 8,  ///< a program the command needs is missing: Python with tensorboard, hookscope-report
  kNeedsTrust = 9,   ///< the model file holds code that reaches outside the process: refused without --trust
};

struct InspectOptions {
  std::string model;
  bool trust = false;  ///< load a model whose code reaches outside the process
  bool confine = true;  ///< Landlock and seccomp before the model is read
  std::vector<std::string> inputs;
  double stepTimeout = 120;  ///< seconds opening the model, or its forward on --input, may take; 0: no limit
};

struct CaptureOptions {
  std::string model;
  bool verbose = false;      ///< a progress line per step, also on a terminal
  bool trust = false;
  bool confine = true;       ///< Landlock and seccomp: writes only beneath the export's folder
  double stepTimeout = 0;    ///< seconds a step may take before the run is ended (0: no limit)
  double openTimeout = 120;  ///< seconds opening the model may take in the engine (0: no limit)
  std::string out;
  std::vector<std::string> hooks;
  std::string kinds = "activation,gradient";
  std::vector<std::string> inputs;
  std::string data;
  std::int64_t batchSize = 0;
  std::int64_t steps = 10;
  std::string loss = "auto";
  std::string optimizer = "sgd";
  double lr = 0.01;
  double momentum = 0.0;
  double weightDecay = 0.0;
  bool eval = false;
  bool noGrad = false;
  std::uint64_t seed = 0;
  int bins = 64;
  std::vector<std::string> saveTensors;
  bool force = false;
  double memoryCapMiB = 512;
  std::vector<std::string> breakOn;  ///< rule names that end the run (exit 6)
  std::vector<std::string> thresholds;  ///< RULE=VALUE
  std::vector<std::string> clampGrad;  ///< PATTERN=V
  std::vector<std::string> scaleGrad;  ///< PATTERN=F
  std::vector<std::string> zeroGrad;   ///< PATTERN
  std::vector<std::string> zeroOutput; ///< PATTERN
  std::vector<std::string> meanOutput; ///< PATTERN
  std::vector<std::string> libraries;  ///< --load-library, for the engine process
};

struct RecordOptions {
  std::string out;
  std::string address;  ///< "" for the default
  std::vector<std::string> hooks;
  std::string kinds = "activation,gradient";
  int bins = 64;
  bool force = false;
  double memoryCapMiB = 512;
  double timeoutSeconds = 0;  ///< how long to wait for a script; 0: forever
  int ranks = 0;              ///< ranks of a job to wait for; 0: the world size the first reports
  double graceSeconds = 60;   ///< after the first rank, how long the others may take to attach
  std::vector<std::string> breakOn;
  std::vector<std::string> thresholds;
};

struct TensorBoardOptions {
  std::string run;     ///< export folder
  std::string logdir;  ///< TensorBoard log folder to write (new, or empty)
  std::string python;  ///< "" : HOOKSCOPE_PYTHON, else the Python HookScope was built with
  std::int64_t memoryCapMiB = 0;  ///< 0: half the memory available (readingCapBytes)
};

struct ReportOptions {
  std::string run;                  ///< export folder
  std::string out;                  ///< the HTML file to write
  std::vector<std::string> layers;  ///< the modules to draw a heatmap of ("" : every hooked one, up to a limit)
  bool force = false;               ///< replace an existing file
  std::string compare;              ///< a second export drawn with it, and where they first diverge
  std::int64_t memoryCapMiB = 0;    ///< 0: half the memory available (readingCapBytes)
};

struct ServeOptions {
  std::string model;
  std::string address;  ///< where the window listens ("" : HOOKSCOPE_ADDRESS, else the default)
  bool trust = false;
  bool confine = true;  ///< Landlock and seccomp before the model is read
};
/// How to start the Python engine for a .pt2 or a whole-model pickle.
struct PythonEngineOptions {
  std::string python;                   ///< "" : HOOKSCOPE_PYTHON, else the Python HookScope was built with
  std::vector<std::string> pythonPath;  ///< folders to import the model's classes from (also HOOKSCOPE_PYTHON_PATH)
  std::string address;                  ///< serve: the window's address
  std::vector<std::string> inputs;      ///< inspect: --input specs
  bool trust = false;
  bool confine = true;
};
/// What several subcommands take: operator libraries, and the Python that runs .pt2 and pickles.
struct SharedOptions {
  std::vector<std::string> libraries;  ///< --load-library
  PythonEngineOptions python;          ///< --python, --python-path
};

/// One subcommand, declared on the command line; `run` runs it once it is chosen.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

// Each declares its subcommand on `app`; the options shared with others go to `shared`.
Command addInspectCommand(CLI::App& app, SharedOptions& shared);
Command addCaptureCommand(CLI::App& app, SharedOptions& shared);
Command addRecordCommand(CLI::App& app);
Command addServeCommand(CLI::App& app, SharedOptions& shared);
Command addTensorBoardCommand(CLI::App& app);
Command addReportCommand(CLI::App& app);
Command addCheckpointCommand(CLI::App& app, SharedOptions& shared);
Command addShowCommand(CLI::App& app);
Command addCompareCommand(CLI::App& app);
Command addExplainCommand(CLI::App& app);

/// serve and inspect: a TorchScript file goes to hookscope-engine (execEngine), a .pt2 or a
/// whole-model pickle to `python -m hookscope.engine`; any other file ends with what it is.
/// Returns only on failure, with the exit code of the message it printed.
int execEngineFor(const std::string& command, const std::string& model, const PythonEngineOptions& options);
/// Runs `python -m hookscope.engine ARGUMENTS...` in `python` ("" : defaultPython()) with the
/// package on PYTHONPATH; returns only when it cannot start, with `why` in the message.
int execPythonEngine(const std::string& python, const std::vector<std::string>& arguments, const std::string& why);
/// As execPythonEngine, but waits for the engine in a child process: the scratch folder the
/// confined engine writes into is made and removed here, on every exit, and a Python that cannot
/// run the engine (exit 1 or 127) is said to be so. Returns the engine's exit code.
int runPythonEngine(const std::string& python, const std::vector<std::string>& arguments, const std::string& why);
/// The hookscope package's folder: HOOKSCOPE_PACKAGE_DIR, else installed beside this program,
/// else the source tree's python/.
std::string pythonPackageDir();
/// HOOKSCOPE_PYTHON, else the Python HookScope was built with.
std::string defaultPython();
/// PYTHONPATH with the hookscope package's folder first.
std::string packagePythonPath();


/// This program's own path (/proc/self/exe); empty when it cannot be read.
std::filesystem::path programPath();
/// Replaces this process with words[0] (looked up on PATH when it names no folder), given the
/// rest as its arguments; returns only when that fails, with errno.
int execWords(std::vector<std::string> words);
/// hookscope-engine, beside this executable: the side of the command line that links LibTorch.
std::string enginePath();
/// Keeps the command line, for execEngine().
void keepCommandLine(int argc, char** argv);
/// hookscope-cli (the viewer's side, no LibTorch) hands the commands that load a model in its
/// own process (inspect, serve, capture --save-tensors) to hookscope-engine beside it, on the
/// same arguments. Returns only when that cannot start, with the exit code of the message.
int execEngine();

/// fnmatch-style glob on a module path; "*" also matches the root's empty path.
bool matchesPattern(const std::string& pattern, const std::string& path);
/// Checks input specs up front, so that a typo is a usage error, not a failed run.
bool validateSpecs(const std::vector<std::string>& specs, std::string* message);
/// The help text of --load-library, --python and --python-path, shared by the commands that take them.
extern const char* const kLibraryHelp;
extern const char* const kPythonHelp;
extern const char* const kPythonPathHelp;
/// Checks a folder name: `--out ""` is a usage error (exit 2), not a folder that cannot be written (5).
const CLI::Validator& nonEmptyFolder();

} // namespace hookscope::cli
