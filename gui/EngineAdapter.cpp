#include "EngineAdapter.h"

#include "AttachListener.h"
#include "ModelArchiveScan.h"
#include "AttachSession.h"
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
  if (auto s = session()) s->close();  // the script detaches and trains on
  if (m_attachThread.joinable()) m_attachThread.join();
}

std::shared_ptr<AttachSession> EngineAdapter::session() const {
  std::lock_guard<std::mutex> lock(m_modelMutex);
  return m_session;
}

void EngineAdapter::setBreakRules(quint32 mask) {
  m_breakRules = mask;
  if (auto s = session()) s->setBreakRules(mask);
}

void EngineAdapter::listen(const QString& address) {
  if (m_listener) {
    Q_EMIT listening(QString::fromStdString(m_listener->address()));
    return;
  }
  if (auto s = session(); s && m_running.load()) {
    Q_EMIT listenFailed(QStringLiteral("A script is attached: Stop (detach) it before attaching another."));
    return;
  }
  if (m_running.load()) {
    Q_EMIT listenFailed(QStringLiteral("Stop the run before attaching a training script."));
    return;
  }
  if (m_attachThread.joinable()) m_attachThread.join();  // the previous script's, finished
  std::string error;
  m_listener = AttachListener::open(address.isEmpty() ? defaultAttachAddress() : address.toStdString(), &error);
  if (!m_listener) {
    Q_EMIT listenFailed(QString::fromStdString(error));
    return;
  }
  m_attachStop = false;
  Q_EMIT listening(QString::fromStdString(m_listener->address()));
  m_attachThread = std::thread([this] { attachLoop(); });
}

void EngineAdapter::stopListening() {
  if (!m_listener) return;
  m_attachStop = true;
  m_listener->wake();
  if (m_attachThread.joinable()) m_attachThread.join();
  m_listener.reset();
}

void EngineAdapter::attachLoop() {
  std::shared_ptr<AttachSession> session;
  while (!m_attachStop.load()) {
    const int fd = m_listener->accept(-1);
    if (fd < 0) continue;
    std::string error;
    const auto& address = m_listener->parsed();
    auto accepted = AttachSession::accept(fd, address.tcp ? address.token : "", !address.tcp,
                                          std::make_shared<CaptureStore>(m_capBytes), &error);
    if (!accepted) {
      Q_EMIT attachRefused(QString::fromStdString(error));
      continue;
    }
    if (const auto& script = accepted->script(); script.worldSize > 1) {
      // Pausing one rank would hang the others in their next all-reduce: a job is recorded whole.
      const std::string message =
          "rank " + std::to_string(script.rank) + " of a torch.distributed job of " + std::to_string(script.worldSize) +
          " ranks: the window attaches one process, not yet every rank of a job. Record the job with "
          "`hookscope-cli record --out DIR` (it takes every rank) and open DIR here with File > Open capture";
      accepted->refuse(message);
      Q_EMIT attachRefused(QString::fromStdString(message));
      continue;
    }
    session = std::move(accepted);
    break;
  }
  if (!session) return;
  // One script per Attach: the listener closes, so a second script is told no one listens.
  QMetaObject::invokeMethod(this, [this] { m_listener.reset(); }, Qt::QueuedConnection);
  session->setBreakRules(m_breakRules.load());
  QMetaObject::invokeMethod(this, [this, session] { adoptSession(session); }, Qt::BlockingQueuedConnection);
  const std::string ended = session->serve([this, session](const AttachedStep& step) {
    StepSummary summary;
    summary.result.step = step.step;
    const auto loss = step.scalars.find("loss");
    summary.result.loss = loss == step.scalars.end() ? std::nan("") : loss->second;
    summary.result.lossFinite = loss == step.scalars.end() || std::isfinite(loss->second);
    summary.result.totalMs = step.seconds * 1e3;
    summary.shapes = step.shapes;
    summary.alerts = step.alerts;
    summary.breakAlert = step.breakAlert;
    m_stepsDone = step.step + 1;
    Q_EMIT stepFinished(summary);
    m_paused = session->paused();
    Q_EMIT runStateChanged(true, m_paused.load());
  });
  m_running = false;
  m_paused = false;
  Q_EMIT runStateChanged(false, false);
  Q_EMIT scriptDetached(QString::fromStdString(session->script().name + ": " + ended));
}

void EngineAdapter::adoptSession(std::shared_ptr<AttachSession> session) {
  m_runner.reset();
  {
    std::lock_guard<std::mutex> lock(m_modelMutex);
    m_model.reset();
    m_session = session;
  }
  m_store = session->store();
  m_store->setCapBytes(m_capBytes);
  session->setRuleSettings(m_ruleSettings);
  m_configured = false;
  m_stepsDone = 0;
  m_interventions.clear();
  m_rules.reset();
  const auto& script = session->script();
  ModelSummary summary;
  summary.path = QStringLiteral("attached:") + QString::fromStdString(script.name);
  summary.fileName = QString::fromStdString(script.name);
  summary.modules = session->modules();
  summary.store = m_store;
  summary.hooks = session->hooks();
  summary.attached = true;
  summary.script = QStringLiteral("%1 (pid %2 on %3, PyTorch %4, %5)")
                       .arg(QString::fromStdString(script.name))
                       .arg(script.pid)
                       .arg(QString::fromStdString(script.host), QString::fromStdString(script.torch),
                            QString::fromStdString(script.device));
  m_running = true;
  m_paused = false;
  Q_EMIT modelLoaded(summary);
  Q_EMIT runStateChanged(true, false);
}

void EngineAdapter::setPaused(bool paused) {
  if (auto s = session(); s && m_running.load()) {
    paused ? s->pause() : s->resume();
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
  if (auto s = session(); s && m_running.load()) {
    s->close();  // detaches: the script's hooks go, it trains on
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
  {
    std::lock_guard<std::mutex> lock(m_modelMutex);
    m_model = std::move(model);
    m_session.reset();
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
  m_runner.reset();
  {
    std::lock_guard<std::mutex> lock(m_modelMutex);
    m_model.reset();
    m_session.reset();
  }
  m_store = data.store;
  m_configured = false;
  Q_EMIT modelLoaded(summary);
}

void EngineAdapter::logIntervention(const std::string& module, const std::string& target, const std::string& action) {
  hookscope::logIntervention(&m_interventions, module, target, action, m_stepsDone.load());
}

void EngineAdapter::setGradientIntervention(int module, GradientIntervention intervention) {
  if (auto s = session()) {
    s->setGradientIntervention(module, intervention);
    return;
  }
  std::lock_guard<std::mutex> lock(m_modelMutex);
  if (!m_model || module < 0 || std::size_t(module) >= m_model->modules().size()) return;
  logIntervention(m_model->modules()[std::size_t(module)].path, "gradient", intervention.describe());
  m_model->setGradientIntervention(module, intervention);
}

void EngineAdapter::setOutputIntervention(int module, OutputIntervention intervention) {
  if (auto s = session()) {
    s->setOutputIntervention(module, intervention);
    return;
  }
  std::lock_guard<std::mutex> lock(m_modelMutex);
  if (!m_model || module <= 0 || std::size_t(module) >= m_model->modules().size()) return;
  logIntervention(m_model->modules()[std::size_t(module)].path, "output", intervention.describe());
  m_model->setOutputIntervention(module, intervention);
}

void EngineAdapter::setHooks(int module, quint8 mask) {
  std::lock_guard<std::mutex> lock(m_modelMutex);
  if (m_session) m_session->setHooks(module, mask);
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
  if (session()) {
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
  if (auto s = session()) {
    if (m_running.load()) {
      s->step(1);  // the script runs one step and pauses again
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
  if (auto s = session()) s->setRuleSettings(settings);
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
  if (session()) {
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

void EngineAdapter::exportAttached(const QString& dir, bool overwrite, const QString& interrupted) {
  const auto s = session();
  ExportManifest manifest;
  manifest.hookscopeVersion = HOOKSCOPE_VERSION;
  manifest.modelFile = s->script().name;
  manifest.config.bins = 64;
  manifest.config.optimizer = OptimizerKind::None;
  manifest.steps = s->stepsDone();
  manifest.thinning = m_store->thinning();
  manifest.memoryCapBytes = m_store->capBytes();
  manifest.interrupted = interrupted.toStdString();
  manifest.script = s->script();
  manifest.script->ended = m_running.load() ? "exported while attached" : "detached";
  manifest.gaps = s->gaps();
  manifest.interventions = s->interventions();
  const auto hooks = s->hooks();
  for (std::size_t i = 0; i < hooks.size(); ++i) {
    if (!hooks[i]) continue;
    manifest.hooked.push_back({s->modules()[i].path, captureKindNames(hooks[i])});
  }
  ExportOptions options;
  options.overwrite = overwrite;
  options.extraFiles = {{"alerts.csv", alertsCsv(s->alerts())}};
  std::string error;
  writeExport(dir.toStdString(), manifest, *m_store, {}, options, &error);
  Q_EMIT exportFinished(dir, QString::fromStdString(error));
}
