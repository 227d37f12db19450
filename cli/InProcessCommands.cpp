// The commands that load a model in this process (hookscope-engine, which links LibTorch):
// inspect, serve, and capture with --save-tensors.
#include "cli/InProcessCommands.h"

#include "cli/CliSupport.h"
#include "common/PrintableText.h"
#include "sandbox/Confinement.h"
#include "model/Model.h"
#include "model/ModelArchiveScan.h"
#include "run/ModelServer.h"
#include "model/OperatorLibraries.h"
#include "run/StepRunner.h"
#include "files/ExportFolder.h"
#include "files/ExportTarget.h"
#include "files/Sha256.h"
#include "links/EngineProcess.h"
#include "wire/AttachListener.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

namespace hookscope::cli {

namespace {

std::unique_ptr<Model> loadOrReport(const std::string& path, bool trust, bool confined, int* code) {
  std::string message;
  // The code in the archive is read as text before LibTorch runs any of it.
  std::vector<ArchiveFinding> findings;
  if (!trust && std::filesystem::is_regular_file(path) && scanModelArchive(path, &findings, &message) && !findings.empty()) {
    *code = refuseUntrusted(path, describeFindings(findings));
    return nullptr;
  }
  std::unique_ptr<Model> model;
  {
    CrashReport crash(kModelLoad, "while LibTorch read " + path +
                                      ": the file is damaged, or its code crashes LibTorch. Save it again with "
                                      "torch.jit.save; if it still crashes, report it with the file. Nothing was written.");
    model = Model::load(path, &message);
  }
  if (!model) *code = error(kModelLoad, confinedRefusal(message, confined));
  return model;
}

// From here on the model's code cannot write outside `writable`, start programs or reach the network.
bool confineOrReport(const std::vector<std::string>& writable, int* code) {
  Confinement done;
  std::string message;
  if (confineProcess(&done, &message, writable)) return true;
  *code = error(kModelLoad, message + "; --no-confine runs the model unconfined (only for a model you trust)");
  return false;
}

std::string displayName(const ModuleInfo& info) { return info.path.empty() ? "(root " + info.name + ")" : info.path; }

// Every module call's output shapes on `inputs` ("call k: shape" entries by module); false with
// the exit code of the message it printed.
bool probeShapes(Model& model, const InspectOptions& options, std::map<std::string, std::vector<std::string>>* shapes,
                 int* code) {
  CrashReport crash(kData, "while " + options.model + " ran on --input: its code or this input crashes LibTorch. "
                           "Nothing was written.");
  std::string message;
  auto store = std::make_shared<CaptureStore>();
  StepRunner runner(model, store);
  RunConfig config;
  config.inputSpecs = options.inputs;
  config.noGrad = true;
  config.optimizer = OptimizerKind::None;
  config.train = false;
  if (!runner.configure(config, &message)) {
    *code = error(kData, message);
    return false;
  }
  runner.setForwardOnly(true);  // shapes only: no loss is computed, so none can fail
  runner.probeShapes();
  StepResult result;
  if (!runner.step(&result, &message)) {
    *code = error(kData, message);
    return false;
  }
  for (const auto& call : runner.outputShapes()) {
    std::string text;
    for (const auto& s : call.shapes) text += (text.empty() ? "" : ", ") + s;
    if (text.empty()) text = "(no tensor)";
    (*shapes)[call.module].push_back(text);
  }
  return true;
}

// The tree as a table; names come from the file: printed so that none can drive the terminal.
void printTree(const Model& model, const std::map<std::string, std::vector<std::string>>& shapes) {
  std::ostringstream out;
  out << model.fileName() << ": " << model.modules().size() << " modules, " << model.modules()[0].totalParams
      << " parameters";
  if (!model.exampleInputSpec().empty()) out << ", input " << model.exampleInputSpec();
  out << "\n";
  // Columns as wide as their longest cell ("TransformerEncoderLayer"), so that none runs into the next.
  std::size_t nameWidth = 40, typeWidth = 18;
  for (const auto& info : model.modules()) {
    nameWidth = std::max(nameWidth, std::size_t(info.depth) * 2 + printableText(displayName(info), false).size() + 2);
    typeWidth = std::max(typeWidth, printableText(info.typeName, false).size() + 2);
  }
  out << std::left << std::setw(int(nameWidth)) << "module" << std::setw(int(typeWidth)) << "type" << std::right
      << std::setw(12) << "own params" << std::setw(14) << "total params";
  if (!shapes.empty()) out << "  output shape";
  out << "\n";
  std::vector<std::string> notCalled;
  for (const auto& info : model.modules()) {
    // Escaped before the columns are padded, so that they line up.
    const std::string name = std::string(std::size_t(info.depth) * 2, ' ') + printableText(displayName(info), false);
    out << std::left << std::setw(int(nameWidth)) << name << std::setw(int(typeWidth)) << printableText(info.typeName, false) << std::right
        << std::setw(12) << info.ownParams << std::setw(14) << info.totalParams;
    const auto found = shapes.find(info.path);
    if (found != shapes.end()) {
      const auto& calls = found->second;
      for (std::size_t c = 0; c < calls.size(); ++c) {
        out << (c ? "; " : "  ") << (calls.size() > 1 ? "call " + std::to_string(c) + ": " : "") << calls[c];
      }
    } else if (!shapes.empty()) {
      out << "  (not called)";
      notCalled.push_back(info.path);
    }
    out << "\n";
  }
  std::cout << printableText(out.str());
  if (!notCalled.empty()) std::cerr << "hookscope-cli: " << notCalledNote(notCalled, "on this input") << "\n";
}

} // namespace

bool loadLibraries(const std::vector<std::string>& paths) {
  for (const auto& path : paths) {
    std::string message;
    if (!loadOperatorLibrary(path, &message)) {
      error(kModelLoad, message);
      return false;
    }
  }
  return true;
}

int runInspect(const InspectOptions& options) {
  std::string message;
  if (!validateSpecs(options.inputs, &message)) return error(kUsage, message);
  int code = kOk;
  if (options.confine && !confineOrReport({}, &code)) return code;
  // A __setstate__ or forward that never returns would hang inspect: it ends at the limit.
  std::atomic<bool> loaded{false};
  StepWatchdog watchdog(options.stepTimeout, [&] {
    const bool opened = loaded.load();
    std::ostringstream text;
    text << (opened ? "the model's forward on --input" : "opening " + options.model) << " did not end within "
         << options.stepTimeout << " s (--step-timeout), so inspect gave up: the model's "
         << (opened ? "forward" : "loading code (a __setstate__)")
         << " may never return; if it is just slow, raise --step-timeout (0: no limit). Nothing was written.";
    error(opened ? kData : kModelLoad, text.str());
    std::cerr.flush();
    ::_exit(opened ? kData : kModelLoad);
  });
  auto model = loadOrReport(options.model, options.trust, options.confine, &code);
  if (!model) return code;
  loaded = true;
  std::map<std::string, std::vector<std::string>> shapes;  // module -> "call k: shape" entries
  if (!options.inputs.empty() && !probeShapes(*model, options, &shapes, &code)) return code;
  watchdog.stop();
  printTree(*model, shapes);
  return kOk;
}

int runServe(const ServeOptions& options, const std::vector<std::string>& libraries) {
  std::string message;
  std::string text = options.address;
  if (text.empty()) {
    const char* env = std::getenv("HOOKSCOPE_ADDRESS");
    text = env && *env ? env : defaultAttachAddress();
  }
  AttachAddress address;
  const int fd = connectAttachAddress(text, &address, &message);
  if (fd < 0) return error(kUsage, message);
  if (address.tcp && address.token.empty()) {
    const char* token = std::getenv("HOOKSCOPE_TOKEN");
    if (token) address.token = token;
  }
  // From here on, nothing in the model file can write a file, start a program or reach the
  // network; the connection above stays.
  hookscope::ServeOptions serve;
  serve.token = address.token;
  if (options.confine) {
    Confinement done;
    if (!confineProcess(&done, &message)) {
      return error(kModelLoad, message + "; run with --no-confine only for a model you trust");
    }
    serve.confinement = done.describe();
  }
  // The window goes away (closed, killed): so does the engine, even inside a step that never ends.
  std::thread([fd] {
    pollfd p{fd, POLLRDHUP, 0};
    while (::poll(&p, 1, -1) < 0) {
    }
    ::_exit(0);
  }).detach();

  if (!loadLibraries(libraries)) return kModelLoad;
  std::vector<ArchiveFinding> findings;
  if (!options.trust && std::filesystem::is_regular_file(options.model) &&
      scanModelArchive(options.model, &findings, &message) && !findings.empty()) {
    static_assert(kNeedsTrust == kEngineNeedsTrust, "the window reads serve's exit code for a trust question");
    return refuseUntrusted(options.model, describeFindings(findings));
  }
  auto model = Model::load(options.model, &message);
  if (!model) return error(kModelLoad, confinedRefusal(message, options.confine));
  serve.sha256 = sha256File(options.model);
  bool clean = false;
  const std::string ended = serveModel(*model, fd, serve, &clean);
  if (!clean) return error(kData, ended);
  ::close(fd);
  return kOk;
}

namespace {

// capture --save-tensors: the model, its hooks and interventions, the runner and the rules in
// this process, and the export of what it ran.
class LocalCapture {
public:
  LocalCapture(const CaptureOptions& options, Model& model, std::shared_ptr<CaptureStore> store,
               const RuleSettings& ruleSettings)
      : m_options(options), m_model(model), m_store(std::move(store)), m_runner(model, m_store), m_rules(ruleSettings) {
    m_rules.setModuleTypes(model.moduleTypes());
  }

  /// Hooks and interventions of `plan` set on the model, for the manifest too.
  void apply(const CapturePlan& plan) {
    const auto& modules = m_model.modules();
    m_hooked = plan.hooked;
    for (std::size_t i = 0; i < modules.size(); ++i) {
      if (plan.masks[i]) m_model.setHooks(int(i), plan.masks[i]);
    }
    for (const auto& [i, gi] : plan.gradient) {
      m_model.setGradientIntervention(i, gi);
      m_interventions.push_back({modules[std::size_t(i)].path, "gradient", gi.describe(), 0, 0});
    }
    for (const auto& [i, oi] : plan.output) {
      m_model.setOutputIntervention(i, oi);
      m_interventions.push_back({modules[std::size_t(i)].path, "output", oi.describe(), 0, 0});
    }
    m_runner.keepTensors(plan.keep);
  }

  bool configure(const RunConfig& config, std::string* message) {
    m_config = config;
    m_runner.probeShapes();  // the first step's output shapes, for the manifest's tree
    return m_runner.configure(config, message);
  }

  /// What the run has, as an export; `kept` adds the saved tensors (not from the watchdog's thread).
  bool write(std::int64_t steps, const std::string& interrupted, bool kept, std::string* problem) {
    ExportManifest manifest;
    manifest.modelFile = m_model.fileName();
    manifest.modelSha256 = sha256File(m_options.model);
    manifest.hookscopeVersion = HOOKSCOPE_VERSION;
    manifest.config = m_config;
    manifest.steps = steps;
    if (manifest.steps > 0) manifest.configurations = {{0, manifest.steps - 1, m_config}};
    manifest.hooked = m_hooked;
    manifest.modules = moduleRecords(m_model.modules(), shapesByModule(m_runner.outputShapes()));
    manifest.interventions = m_interventions;
    for (auto& i : manifest.interventions) i.toStep = std::max<std::int64_t>(0, steps - 1);
    manifest.thinning = m_store->thinning();
    manifest.memoryCapBytes = m_store->capBytes();
    manifest.interrupted = interrupted;
    ExportOptions exportOptions;
    exportOptions.overwrite = m_options.force;
    exportOptions.lockHeld = true;
    exportOptions.extraFiles = {{"alerts.csv", alertsCsv(m_rules.alerts())}};
    return writeExport(m_options.out, manifest, *m_store, kept ? m_runner.keptTensorsPickle() : std::vector<char>{},
                       exportOptions, problem);
  }

  /// The steps, with their rules and progress; a step past --step-timeout exports what came
  /// before from the watchdog's thread and ends the process.
  StepRunner::RunEnd run(const std::set<RuleKind>& breakOn, std::string* message) {
    const bool terminal = ::isatty(STDERR_FILENO);
    const auto start = std::chrono::steady_clock::now();
    // A step that never ends (a forward that loops) cannot be interrupted inside LibTorch: past
    // --step-timeout the steps before it are exported from this thread and the process ends.
    std::atomic<std::int64_t> stepsEnded{0};
    StepWatchdog watchdog(m_options.stepTimeout, [&] { timedOut(stepsEnded.load()); });
    // Without --save-tensors the model runs in an engine process, and a crash there leaves the
    // steps before it to export; here it takes this process.
    std::optional<CrashReport> crash;
    crash.emplace(kData, "while " + m_options.model + " ran: its code or its input crashes LibTorch. Nothing was "
                         "written; without --save-tensors a crash leaves the steps before it exported.");
    const auto end = m_runner.run(m_options.steps, [&](const StepResult& r) {
      stepsEnded = r.step + 1;
      watchdog.stepEnded();
      if (StopSignals::received()) m_runner.requestStop();
      const auto fired = m_rules.evaluate(*m_store, r.step, m_runner.lastStepOrder());
      m_store->setAlertBytes(m_rules.bytes());
      for (const auto& alert : fired) {
        if (breakOn.count(alert.rule) && !m_breakAlert) {
          m_breakAlert = alert;
          m_runner.requestStop();
        }
      }
      printStepProgress({r.step, m_options.steps, r.loss, m_store->captureCount(), m_store->bytesUsed(),
                         m_store->capBytes()},
                        start, terminal, m_options.verbose);
    }, message);
    crash.reset();
    watchdog.stop();
    if (terminal && !m_options.verbose) std::cerr << "\n";
    return end;
  }

  std::int64_t stepsDone() const { return m_runner.stepsDone(); }
  std::size_t alerts() const { return m_rules.alerts().size(); }
  const std::optional<Alert>& breakAlert() const { return m_breakAlert; }
  const std::vector<HookedModule>& hooked() const { return m_hooked; }

private:
  [[noreturn]] void timedOut(std::int64_t steps) {
    std::string problem;
    const bool written = write(steps, "step timeout", false, &problem);
    std::ostringstream text;
    // Steps are numbered from 0, as in stats.csv: say which one that is.
    text << "step " << steps << (steps == 0 ? " (the first)" : "") << " did not end within --step-timeout "
         << m_options.stepTimeout << " s (the model's forward may loop forever), so the run was ended; "
         << (written ? "the export of the " + std::to_string(steps) + " steps before it is in " + m_options.out
                     : "its export failed: " + problem);
    std::cerr << "\n";
    error(kData, text.str());
    std::cerr.flush();
    ::_exit(kData);
  }

  const CaptureOptions& m_options;
  Model& m_model;
  std::shared_ptr<CaptureStore> m_store;
  StepRunner m_runner;
  RuleEvaluator m_rules;
  RunConfig m_config;
  std::vector<HookedModule> m_hooked;
  std::vector<InterventionRecord> m_interventions;
  std::optional<Alert> m_breakAlert;
};

} // namespace

int runCaptureInProcess(const CaptureOptions& options, std::uint8_t kinds, const std::set<RuleKind>& breakOn,
                        const RuleSettings& ruleSettings) {
  int code = kOk;
  std::string message;
  // The export is written in its folder's parent (a temporary folder, then renamed).
  const std::string exportParent = std::filesystem::path(exportTargetPath(options.out)).parent_path().string();
  if (options.confine && !confineOrReport({exportParent}, &code)) return code;
  auto model = loadOrReport(options.model, options.trust, options.confine, &code);
  if (!model) return code;
  CapturePlan plan;
  if (!planCapture(options, model->modules(), kinds, &plan, &message)) return error(kUsage, message);
  RunConfig config;
  if (!captureConfig(options, model->exampleInputSpec(), &config, &message)) return error(kUsage, message);
  auto store = std::make_shared<CaptureStore>(std::size_t(options.memoryCapMiB * 1024 * 1024));
  LocalCapture capture(options, *model, store, ruleSettings);
  capture.apply(plan);
  if (!capture.configure(config, &message)) return error(kData, message);
  if (StopSignals::received()) return 128 + StopSignals::received();
  if (capture.run(breakOn, &message) == StepRunner::RunEnd::Failed) return error(kData, message);
  const int stopSignal = StopSignals::received();
  const std::string interrupted = stopSignal == 0 ? "" : stopSignal == SIGINT ? "SIGINT" : "SIGTERM";
  if (!capture.write(capture.stepsDone(), interrupted, true, &message)) return error(kOutput, message);
  return reportCaptureEnd(options.out, *store, capture.stepsDone(), capture.alerts(), "", interrupted,
                          capture.breakAlert(), capture.hooked());
}

} // namespace hookscope::cli
