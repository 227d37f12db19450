// hookscope-cli export-tensorboard and report: an export for other readers.
//
// export-tensorboard: the series as TensorBoard event files. The files are
// written by PyTorch's SummaryWriter (add_histogram_raw takes HookScope's statistics as they are),
// run in Python; this side reads the export and hands the series over as JSON lines.

#include "cli/CliCommands.h"
#include "cli/CliSupport.h"
#include "files/ExportFolder.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <fcntl.h>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace hookscope::cli {
namespace {

std::string kindPath(const SeriesKey& key) {
  return std::string(captureKindName(key.kind)) + "/" + (key.module.empty() ? "(root)" : key.module) + "/" +
         std::to_string(key.call) + "/" + std::to_string(key.index);
}

/// The stream's first line: the runs' ranks, and how many histograms and scalars follow.
std::string beginLine(const std::vector<int>& ranks, std::size_t histograms, std::size_t scalars) {
  return nlohmann::json{{"type", "begin"}, {"ranks", ranks}, {"histograms", histograms}, {"scalars", scalars}}.dump();
}

/// The series of an export, one JSON object a line, as hookscope/tensorboard_export.py reads them.
std::vector<std::string> seriesLines(const CaptureStore& store) {
  std::vector<std::string> lines;
  // The job's ranks, and a sharded tensor's whole-tensor series as a run of their own ("whole").
  auto ranks = store.ranks();
  for (const auto& key : store.seriesKeys()) {
    if (key.rank == kWholeRank) {
      ranks.push_back(kWholeRank);
      break;
    }
  }
  lines.emplace_back();  // the first line, with the totals (for the writer's progress line), at the end
  std::size_t histograms = 0, scalars = 0;
  auto scalar = [&](int rank, const std::string& tag, std::int64_t step, double value) {
    // NaN and Inf are not JSON: null is NaN, "inf" and "-inf" the infinities (Python's float() reads them).
    const nlohmann::json v = std::isnan(value)   ? nlohmann::json(nullptr)
                             : std::isinf(value) ? nlohmann::json(value > 0 ? "inf" : "-inf")
                                                 : nlohmann::json(value);
    lines.push_back(nlohmann::json{{"type", "scalar"}, {"rank", rank}, {"tag", tag}, {"step", step}, {"value", v}}
                        .dump());
    ++scalars;
  };
  for (const int rank : ranks) {
    for (const auto& name : store.scalarNames()) {
      for (const auto& p : store.scalars(name, rank)) scalar(rank, name, p.step, p.value);
    }
    for (const auto& key : store.seriesKeys()) {
      if (key.rank != rank) continue;
      const auto points = store.series(key);
      const std::string path = kindPath(key);
      bool nonFinite = false;
      for (const auto& p : points) nonFinite = nonFinite || p.stats.hasNonFinite();
      // What float16 and fp8 would lose, as the fraction of the tensor's values: the kinds a
      // series ever had any of (most series have none, and would only add flat lines).
      constexpr std::pair<const char*, std::int64_t TensorStats::*> kPrecision[] = {
          {"precision/f16_overflow/", &TensorStats::f16Overflow},
          {"precision/f16_underflow/", &TensorStats::f16Underflow},
          {"precision/e4m3_underflow/", &TensorStats::e4m3Underflow},
          {"precision/e5m2_underflow/", &TensorStats::e5m2Underflow}};
      bool anyPrecision[std::size(kPrecision)] = {};
      for (const auto& p : points) {
        for (std::size_t k = 0; k < std::size(kPrecision); ++k) anyPrecision[k] |= p.stats.*kPrecision[k].second > 0;
      }
      for (const auto& p : points) {
        for (std::size_t k = 0; k < std::size(kPrecision); ++k) {
          if (anyPrecision[k] && p.stats.hasPrecision() && p.stats.numel > 0) {
            scalar(rank, kPrecision[k].first + path, p.step, double(p.stats.*kPrecision[k].second) / double(p.stats.numel));
          }
        }
      }
      for (const auto& p : points) {
        const auto& s = p.stats;
        // TensorBoard's histograms hold finite values only: NaN and Inf go as scalars of their own.
        if (nonFinite) {
          scalar(rank, "nan_count/" + path, p.step, double(s.nanCount));
          scalar(rank, "inf_count/" + path, p.step, double(s.infCount));
        }
        if (key.kind == CaptureKind::Gradient || key.kind == CaptureKind::ParamGrad) {
          scalar(rank, "grad_norm/" + path, p.step, s.l2norm);
        }
        const std::int64_t finite = s.numel - s.nanCount - s.infCount;
        if (s.histogram.empty() || finite <= 0) continue;
        const auto edges = s.edges();
        const double n = double(finite);
        // Sample std (n-1) back to the sum of squares: sum x^2 = (n-1) std^2 + n mean^2.
        const double sumSquares = (n - 1) * s.std * s.std + n * s.mean * s.mean;
        lines.push_back(nlohmann::json{{"type", "histogram"}, {"rank", rank}, {"tag", path}, {"step", p.step},
                                       {"min", s.min}, {"max", s.max}, {"num", finite}, {"sum", s.mean * n},
                                       {"sum_squares", sumSquares},
                                       {"limits", std::vector<double>(edges.begin() + 1, edges.end())},
                                       {"counts", s.histogram}}
                            .dump());
        ++histograms;
      }
    }
  }
  lines.push_back(nlohmann::json{{"type", "end"}, {"histograms", histograms}, {"scalars", scalars}}.dump());
  lines.front() = beginLine(ranks, histograms, scalars);
  return lines;
}

/// Writes an export's histograms and scalars as TensorBoard event files, through the
/// hookscope package's writer (python -m hookscope.tensorboard_export) in the chosen Python.
int runExportTensorBoard(const TensorBoardOptions& options) {
  ExportData data;
  std::string message;
  if (!readExportCapped(options.run, options.memoryCapMiB, &data, &message)) return error(kData, message);
  const auto lines = seriesLines(*data.store);

  const std::string python = options.python.empty() ? defaultPython() : options.python;
  const std::string package = pythonPackageDir();
  std::vector<std::string> environment{"PYTHONPATH=" + packagePythonPath()};
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, "PYTHONPATH=", 11) != 0) environment.push_back(*e);
  }
  std::vector<char*> envp;
  for (auto& e : environment) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> words{python, "-m", "hookscope.tensorboard_export", options.logdir};
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);

  int pipeFds[2];
  if (::pipe2(pipeFds, O_CLOEXEC) != 0) return error(kOutput, std::string("cannot make a pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipeFds[0], STDIN_FILENO);
  pid_t pid = 0;
  const int spawned = ::posix_spawnp(&pid, python.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipeFds[0]);
  if (spawned != 0) {
    ::close(pipeFds[1]);
    return error(kMissingTool, "cannot run " + python + " (" + std::strerror(spawned) +
                                   "): the TensorBoard log is written by PyTorch's SummaryWriter in Python; name a "
                                   "Python with torch and tensorboard with --python (or HOOKSCOPE_PYTHON)");
  }
  // The writer may stop reading (a log folder it refuses): its message says why, not a SIGPIPE.
  struct sigaction ignore {}, saved {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &saved);
  FILE* out = ::fdopen(pipeFds[1], "w");
  for (const auto& line : lines) {
    if (!out || std::fputs(line.c_str(), out) < 0 || std::fputc('\n', out) < 0) break;
  }
  if (out) std::fclose(out); else ::close(pipeFds[1]);
  ::sigaction(SIGPIPE, &saved, nullptr);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) {
    const int code = WEXITSTATUS(status);
    if (code == 1 || code == 127) {  // Python could not start the module (not our exit codes)
      return error(kMissingTool, python + " could not run hookscope.tensorboard_export from " + package +
                                     " (exit " + std::to_string(code) + "); name a Python with torch and "
                                     "tensorboard with --python, or set HOOKSCOPE_PACKAGE_DIR to HookScope's python/ folder");
    }
    return code;
  }
  return error(kOutput, python + " ended by signal " + std::to_string(WTERMSIG(status)) +
                            " while writing " + options.logdir + "; nothing was written there");
}

/// Writes a self-contained HTML report of an export, drawn by hookscope-report (the window's plot
/// code, offscreen) beside this program.
int runReport(const ReportOptions& options) {
  // The report is drawn by the window's plot code, which this side (no Qt) does not link:
  // hookscope-report, installed beside it, or in the build tree's gui/ folder.
  const auto self = programPath().parent_path();
  std::string program;
  for (const auto& candidate : {self / "hookscope-report", self / ".." / "gui" / "hookscope-report"}) {
    if (!self.empty() && ::access(candidate.c_str(), X_OK) == 0) {
      program = candidate.lexically_normal().string();
      break;
    }
  }
  if (program.empty()) {
    return error(kMissingTool, "hookscope-report is not installed beside hookscope-cli: it is built with the window "
                               "(HOOKSCOPE_BUILD_GUI=ON, as scripts/build.sh does), whose plot code draws the report");
  }
  std::vector<std::string> words{program, options.run, "--out", options.out};
  for (const auto& layer : options.layers) {
    words.push_back("--layer");
    words.push_back(layer);
  }
  if (options.force) words.push_back("--force");
  if (options.memoryCapMiB > 0) {
    words.push_back("--memory-cap");
    words.push_back(std::to_string(options.memoryCapMiB));
  }
  if (!options.compare.empty()) {
    words.push_back("--compare");
    words.push_back(options.compare);
  }
  return error(kMissingTool, "cannot start " + program + ": " + std::strerror(execWords(words)));
}

}  // namespace

Command addTensorBoardCommand(CLI::App& app) {
  auto tensorboard = std::make_shared<TensorBoardOptions>();
  auto* command = app.add_subcommand(
      "export-tensorboard",
      "Write an export's histograms (every series, every step) and scalars (loss, lr, the script's scalars, each "
      "gradient's norm, NaN/Inf counts) as TensorBoard event files, with PyTorch's SummaryWriter; ranks become runs.");
  command->add_option("run", tensorboard->run, "export folder")->required();
  command->add_option("logdir", tensorboard->logdir, "TensorBoard log folder to write: new or empty")
      ->required()->check(nonEmptyFolder());
  command->add_option("--python", tensorboard->python,
                      "Python with torch and tensorboard (default: HOOKSCOPE_PYTHON, else the one HookScope "
                      "was built with)");
  command->add_option("--memory-cap", tensorboard->memoryCapMiB, kReadingCapHelp);

  return {command, [tensorboard] { return runExportTensorBoard(*tensorboard); }};
}

Command addReportCommand(CLI::App& app) {
  auto report = std::make_shared<ReportOptions>();
  auto* command = app.add_subcommand(
      "report", "Write a self-contained HTML report of an export (images embedded, no network): the loss and scalars, "
                "every hooked layer's gradient norm, a histogram-over-time heatmap per layer, the alerts and the run's "
                "configuration, drawn by the window's plot code without a display.");
  command->add_option("run", report->run, "export folder")->required();
  command->add_option("--out", report->out, "the HTML file to write")->required()->check(nonEmptyFolder());
  command->add_option("--layer", report->layers,
                      "a layer to draw a heatmap of (repeatable; default: every hooked layer, up to 16)");
  command->add_flag("--force", report->force, "replace an existing file");
  command->add_option("--compare", report->compare,
                      "a second export: drawn over the first (dashed lines, outlines), with where they first diverge");
  command->add_option("--memory-cap", report->memoryCapMiB, kReadingCapHelp);

  return {command, [report] { return runReport(*report); }};
}

}  // namespace hookscope::cli
