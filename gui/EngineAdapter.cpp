#include "EngineAdapter.h"

#include "AttachListener.h"
#include "ModelArchiveScan.h"
#include "AttachJob.h"
#include "ExportFolder.h"
#include "OperatorLibraries.h"
#include "Sha256.h"

#include <QFileInfo>
#include <QMetaObject>

#include <algorithm>
#include <cmath>

using namespace hookscope;

void registerEngineTypes() {
  qRegisterMetaType<ModelSummary>();
  qRegisterMetaType<StepSummary>();
  qRegisterMetaType<hookscope::RunConfig>();
}

EngineAdapter::EngineAdapter(QObject* parent) : QObject(parent) {}

EngineAdapter::~EngineAdapter() {
  m_attachStop = true;
  if (m_listener) m_listener->wake();
  if (auto j = job()) j->close();  // the scripts detach and train on
  if (m_attachThread.joinable()) m_attachThread.join();
  // The job's rank threads report through this object: they end here, not after it.
  std::shared_ptr<AttachJob> ended;
  {
    std::lock_guard<std::mutex> lock(m_modelMutex);
    ended = std::move(m_job);
  }
}

void EngineAdapter::setBreakRules(quint32 mask) {
  m_breakRules = mask;
  if (auto j = job()) j->setBreakRules(mask);
}

void EngineAdapter::setPaused(bool paused) {
  if (auto j = job(); j && m_running.load()) {
    paused ? j->pause() : j->resume();
    m_paused = paused;
    Q_EMIT runStateChanged(true, paused);
    return;
  }
  const bool was = m_paused.exchange(paused);
  if (was && !paused && m_running.load()) {
    QMetaObject::invokeMethod(this, &EngineAdapter::runNext, Qt::QueuedConnection);
  }
  Q_EMIT runStateChanged(m_running.load(), paused);
}

void EngineAdapter::requestStop() {
  if (auto j = job(); j && m_running.load()) {
    j->close();  // detaches: the scripts' hooks go, they train on
    return;
  }
  m_stop = true;
  if (m_paused.load() && m_running.load()) {
    QMetaObject::invokeMethod(this, &EngineAdapter::runNext, Qt::QueuedConnection);
  }
}

void EngineAdapter::loadOperatorLibraries(const QStringList& paths) {
  for (const QString& path : paths) {
    std::string error;
    if (!loadOperatorLibrary(path.toStdString(), &error)) Q_EMIT libraryFailed(QString::fromStdString(error));
  }
}

void EngineAdapter::loadModel(const QString& path, bool trusted) {
  if (m_running.load()) {
    Q_EMIT loadFailed(QStringLiteral("Stop the run before opening another model."));
    return;
  }
  std::string error;
  std::vector<ArchiveFinding> findings;
  if (!trusted && scanModelArchive(path.toStdString(), &findings, &error) && !findings.empty()) {
    Q_EMIT trustNeeded(path, QString::fromStdString(describeFindings(findings)));
    return;
  }
  auto model = Model::load(path.toStdString(), &error);
  if (!model) {
    Q_EMIT loadFailed(QString::fromStdString(error));  // the open model stays as it was
    return;
  }
  std::vector<std::uint8_t> hooks(model->modules().size(), 0);
  // Reset weights reloads the same file: keep what was ticked.
  if (m_model && m_model->path() == model->path() && m_model->modules().size() == hooks.size()) {
    for (std::size_t i = 0; i < hooks.size(); ++i) {
      hooks[i] = m_model->hooks(int(i));
      model->setHooks(int(i), hooks[i]);
    }
  }
  m_runner.reset();
  std::shared_ptr<AttachJob> ended;  // a job that ended: its threads are joined outside the lock
  {
    std::lock_guard<std::mutex> lock(m_modelMutex);
    m_model = std::move(model);
    ended = std::move(m_job);
  }
  m_store = std::make_shared<CaptureStore>(m_capBytes);
  m_runner = std::make_unique<StepRunner>(*m_model, m_store);
  m_configured = false;
  m_wantShapes = true;
  m_stepsDone = 0;
  m_interventions.clear();
  m_configHistory.clear();
  m_rules = std::make_unique<RuleEngine>(m_ruleSettings);
  m_rules->setModuleTypes(m_model->moduleTypes());
  ModelSummary summary;
  summary.path = path;
  summary.fileName = QString::fromStdString(m_model->fileName());
  summary.exampleInput = QString::fromStdString(m_model->exampleInputSpec());
  summary.modules = m_model->modules();
  summary.store = m_store;
  summary.hooks = hooks;
  Q_EMIT modelLoaded(summary);
}

void EngineAdapter::openCapture(const QString& dir) {
  if (m_running.load()) {
    Q_EMIT loadFailed(QStringLiteral("Stop the run before opening a capture."));
    return;
  }
  ExportData data;
  std::string error;
  if (!readExport(dir.toStdString(), &data, &error)) {
    Q_EMIT loadFailed(QString::fromStdString(error));
    return;
  }
  // Without the model, the tree is rebuilt from the hooked modules' dotted paths.
  ModelSummary summary;
  summary.path = dir;
  summary.fileName = QString::fromStdString(data.manifest.modelFile) + QStringLiteral(" (capture)");
  summary.reviewOnly = true;
  summary.store = data.store;
  std::map<std::string, int> index;
  auto add = [&](const std::string& path, auto& self) -> int {
    auto found = index.find(path);
    if (found != index.end()) return found->second;
    ModuleInfo info;
    info.path = path;
    int parent = -1;
    if (!path.empty()) {
      const auto dot = path.rfind('.');
      parent = self(dot == std::string::npos ? std::string() : path.substr(0, dot), self);
      info.name = dot == std::string::npos ? path : path.substr(dot + 1);
      info.depth = summary.modules[std::size_t(parent)].depth + 1;
    } else {
      info.name = data.manifest.modelFile;
    }
    info.typeName = "";
    info.parent = parent;
    const int at = int(summary.modules.size());
    summary.modules.push_back(info);
    summary.hooks.push_back(0);
    if (parent >= 0) summary.modules[std::size_t(parent)].children.push_back(at);
    index[path] = at;
    return at;
  };
  add("", add);
  for (const auto& hooked : data.manifest.hooked) {
    const int at = add(hooked.module, add);
    std::uint8_t mask = 0;
    for (const auto& kind : hooked.kinds) {
      if (auto k = parseCaptureKind(kind)) mask |= kindBit(*k);
    }
    summary.hooks[std::size_t(at)] = mask;
  }
  for (const auto& record : data.manifest.interventions) add(record.module, add);
  summary.alerts = std::move(data.alerts);
  summary.interventions = data.manifest.interventions;
  summary.worldSize = std::max<int>(int(data.manifest.ranks.size()), int(data.store->ranks().size()));
  m_runner.reset();
  std::shared_ptr<AttachJob> ended;
  {
    std::lock_guard<std::mutex> lock(m_modelMutex);
    m_model.reset();
    ended = std::move(m_job);
  }
  m_store = data.store;
  m_configured = false;
  Q_EMIT modelLoaded(summary);
}

void EngineAdapter::logIntervention(const std::string& module, const std::string& target, const std::string& action) {
  hookscope::logIntervention(&m_interventions, module, target, action, m_stepsDone.load());
}

void EngineAdapter::setGradientIntervention(int module, GradientIntervention intervention) {
  if (auto j = job()) {
    j->setGradientIntervention(module, intervention);
    return;
  }
  std::lock_guard<std::mutex> lock(m_modelMutex);
  if (!m_model || module < 0 || std::size_t(module) >= m_model->modules().size()) return;
  logIntervention(m_model->modules()[std::size_t(module)].path, "gradient", intervention.describe());
  m_model->setGradientIntervention(module, intervention);
}

void EngineAdapter::setOutputIntervention(int module, OutputIntervention intervention) {
  if (auto j = job()) {
    j->setOutputIntervention(module, intervention);
    return;
  }
  std::lock_guard<std::mutex> lock(m_modelMutex);
  if (!m_model || module <= 0 || std::size_t(module) >= m_model->modules().size()) return;
  logIntervention(m_model->modules()[std::size_t(module)].path, "output", intervention.describe());
  m_model->setOutputIntervention(module, intervention);
}

void EngineAdapter::setHooks(int module, quint8 mask) {
  std::lock_guard<std::mutex> lock(m_modelMutex);
  if (m_job) m_job->setHooks(module, mask);
  if (m_model) m_model->setHooks(module, mask);
}

bool EngineAdapter::prepare(const RunConfig& config) {
  if (!m_runner) {
    Q_EMIT failed(QStringLiteral("Open a model first (File > Open)."));
    return false;
  }
  std::string error;
  if (!m_configured || config != m_config) {
    if (!m_runner->configure(config, &error)) {
      Q_EMIT failed(QString::fromStdString(error));
      return false;
    }
    // New inputs give new output shapes: probe them again at the next step.
    if (!m_configured || config.inputSpecs != m_config.inputSpecs || config.dataFile != m_config.dataFile ||
        config.batchSize != m_config.batchSize) {
      m_wantShapes = true;
    }
    m_config = config;
    m_configured = true;
    logConfig(&m_configHistory, config, m_stepsDone.load());
  }
  return true;
}

void EngineAdapter::run(const RunConfig& config, qint64 steps) {
  if (job()) {
    setPaused(false);  // the script's own loop runs; the window resumes it
    return;
  }
  if (m_running.load() || !prepare(config)) return;
  m_remaining = steps > 0 ? steps : -1;
  m_stop = false;
  m_paused = false;
  m_running = true;
  Q_EMIT runStateChanged(true, false);
  QMetaObject::invokeMethod(this, &EngineAdapter::runNext, Qt::QueuedConnection);
}

void EngineAdapter::stepOnce(const RunConfig& config) {
  if (m_running.load() && !m_paused.load()) return;
  if (auto j = job()) {
    if (m_running.load()) {
      j->step(1);  // every rank runs one step and pauses again
      Q_EMIT runStateChanged(true, false);
    }
    return;
  }
  if (!prepare(config)) return;
  doStep();
}

void EngineAdapter::runNext() {
  if (!m_running.load()) return;
  if (m_stop.load()) {
    finishRun();
    return;
  }
  if (m_paused.load()) return;  // setPaused(false) schedules the next turn
  if (!doStep()) {
    finishRun();
    return;
  }
  if (m_remaining > 0 && --m_remaining == 0) {
    finishRun();
    return;
  }
  QMetaObject::invokeMethod(this, &EngineAdapter::runNext, Qt::QueuedConnection);
}

bool EngineAdapter::doStep() {
  if (m_wantShapes) m_runner->probeShapes();
  StepSummary summary;
  std::string error;
  if (!m_runner->step(&summary.result, &error)) {
    Q_EMIT failed(QString::fromStdString(error));
    return false;
  }
  summary.finishedStep = summary.result.step;
  if (m_wantShapes) {
    summary.shapes = m_runner->outputShapes();
    m_wantShapes = false;
  }
  m_stepsDone = m_runner->stepsDone();
  if (m_rules) {
    summary.alerts = m_rules->evaluate(*m_store, summary.result.step, m_runner->lastStepOrder());
    m_store->setAlertBytes(m_rules->bytes());
    for (const auto& alert : summary.alerts) {
      if (m_breakRules.load() & (1u << unsigned(alert.rule))) {
        summary.breakAlert = alert;
        break;
      }
    }
  }
  Q_EMIT stepFinished(summary);
  if (summary.breakAlert && m_running.load()) {
    m_paused = true;  // runNext sees it before the next step
    Q_EMIT runStateChanged(true, true);
  }
  return true;
}

void EngineAdapter::finishRun() {
  m_running = false;
  m_paused = false;
  m_stop = false;
  Q_EMIT runStateChanged(false, false);
}

void EngineAdapter::resetWeights() {
  if (!m_model) return;
  loadModel(QString::fromStdString(m_model->path()), /*trusted=*/true);  // the user opened it already
}

void EngineAdapter::setRuleSettings(const RuleSettings& settings) {
  m_ruleSettings = settings;
  if (auto j = job()) j->setRuleSettings(settings);
  if (m_rules) m_rules->setSettings(settings);
}

void EngineAdapter::setMemoryCap(qint64 bytes) {
  m_capBytes = std::size_t(std::max<qint64>(bytes, 1 << 20));
  if (m_store) m_store->setCapBytes(m_capBytes);
}

void EngineAdapter::exportCaptures(const QString& dir, bool overwrite, const QString& interrupted) {
  if (!m_store) {
    Q_EMIT exportFinished(dir, QStringLiteral("Nothing to export: open a model and run some steps."));
    return;
  }
  if (job()) {
    exportAttached(dir, overwrite, interrupted);
    return;
  }
  ExportManifest manifest;
  manifest.hookscopeVersion = HOOKSCOPE_VERSION;
  manifest.config = m_config;
  manifest.thinning = m_store->thinning();
  manifest.memoryCapBytes = m_store->capBytes();
  manifest.interrupted = interrupted.toStdString();
  std::vector<char> tensors;
  if (m_model) {
    manifest.modelFile = m_model->fileName();
    manifest.modelSha256 = sha256File(m_model->path());
    manifest.steps = m_runner ? m_runner->stepsDone() : 0;
    {
      std::lock_guard<std::mutex> lock(m_modelMutex);
      manifest.interventions = m_interventions;
    }
    for (auto& record : manifest.interventions) {
      if (record.toStep < 0) record.toStep = manifest.steps - 1;
    }
    // Configurations set but never stepped with are not part of the run.
    for (const auto& record : m_configHistory) {
      if (record.fromStep >= manifest.steps) continue;
      manifest.configurations.push_back(record);
      if (manifest.configurations.back().toStep < 0) manifest.configurations.back().toStep = manifest.steps - 1;
    }
    if (!manifest.configurations.empty()) manifest.config = manifest.configurations.back().config;
    for (const auto& info : m_model->modules()) {
      const std::uint8_t mask = m_model->hooks(m_model->findModule(info.path));
      if (!mask) continue;
      manifest.hooked.push_back({info.path, captureKindNames(mask)});
    }
  } else {
    const auto steps = m_store->steps();
    manifest.steps = steps.empty() ? 0 : steps.back() + 1;
  }
  ExportOptions options;
  options.overwrite = overwrite;
  if (m_rules) options.extraFiles = {{"alerts.csv", alertsCsv(m_rules->alerts())}};
  std::string error;
  writeExport(dir.toStdString(), manifest, *m_store, tensors, options, &error);
  Q_EMIT exportFinished(dir, QString::fromStdString(error));
}
