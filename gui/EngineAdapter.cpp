#include "EngineAdapter.h"

#include "files/ModelFileKind.h"

#include "sessions/AttachJob.h"
#include "wire/AttachListener.h"
#include "sessions/EngineProcess.h"
#include "files/ExportFolder.h"

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QMetaObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QTimer>

#include <algorithm>
#include <chrono>
#include <cmath>

using namespace hookscope;

QString cliMessage(const QByteArray& standardError) {
  const QString text = QString::fromUtf8(standardError).trimmed();
  const QString prefix = QStringLiteral("hookscope-cli: ");
  const int last = text.lastIndexOf(prefix);
  return last >= 0 ? text.mid(last + prefix.size()) : text;
}

QString cliProgram() {
  const QString given = qEnvironmentVariable("HOOKSCOPE_CLI");
  if (!given.isEmpty()) return given;
  // Its name until 0.1: it names hookscope-cli, not an engine. Read for one more release.
  const QString old = qEnvironmentVariable("HOOKSCOPE_ENGINE");
  if (!old.isEmpty()) {
    static const bool warned = [] {
      qWarning("hookscope: HOOKSCOPE_ENGINE is now HOOKSCOPE_CLI (it names hookscope-cli); the old name "
               "is read until the next release");
      return true;
    }();
    (void)warned;
    return old;
  }
  const QDir here(QCoreApplication::applicationDirPath());
  for (const QString& candidate : {here.filePath(QStringLiteral("hookscope-cli")),
                                   here.filePath(QStringLiteral("../cli/hookscope-cli"))}) {
    if (QFileInfo(candidate).isExecutable()) return QFileInfo(candidate).canonicalFilePath();
  }
  return here.filePath(QStringLiteral("hookscope-cli"));
}

void registerEngineTypes() {
  qRegisterMetaType<ModelSummary>();
  qRegisterMetaType<StepSummary>();
  qRegisterMetaType<hookscope::RunConfig>();
}

EngineAdapter::EngineAdapter(QObject* parent) : QObject(parent) {}

qint64 EngineAdapter::nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

EngineAdapter::~EngineAdapter() {
  m_loadCancel = true;
  if (m_loadThread.joinable()) m_loadThread.join();
  m_attachStop = true;
  if (m_listener) m_listener->wake();
  if (m_engineEnding) *m_engineEnding = true;
  if (auto j = job()) j->close();  // scripts detach and train on; an engine process ends
  if (m_attachThread.joinable()) m_attachThread.join();
  // The job's rank threads report through this object: they end here, not after it.
  std::shared_ptr<AttachJob> ended;
  std::shared_ptr<EngineProcess> process;
  {
    std::lock_guard<std::mutex> lock(m_modelMutex);
    ended = std::move(m_job);
    process = std::move(m_engineProcess);
  }
}

bool EngineAdapter::engineOpen() const {
  std::lock_guard<std::mutex> lock(m_modelMutex);
  return m_engineProcess != nullptr;
}

void EngineAdapter::setBreakRules(quint32 mask) {
  m_breakRules = mask;
  if (auto j = job()) j->setBreakRules(mask);
}

void EngineAdapter::setPaused(bool paused) {
  auto j = job();
  if (!j || !m_running.load()) {
    m_paused = paused;
    Q_EMIT runStateChanged(m_running.load(), paused);
    return;
  }
  if (paused) {
    j->pause();
  } else if (engineOpen() && m_remaining.load() > 0) {
    m_busySince = nowMs();
    j->step(int(std::min<qint64>(m_remaining.load(), 1 << 30)));  // the rest of the run's steps
  } else {
    if (engineOpen()) m_busySince = nowMs();
    j->resume();
  }
  m_paused = paused;
  Q_EMIT runStateChanged(true, paused);
}

void EngineAdapter::resume(const RunConfig& config) {
  if (!m_running.load() || !m_paused.load()) return;
  if (m_engineJob.load() && !prepare(config)) return;
  setPaused(false);
}

void EngineAdapter::requestStop() {
  auto j = job();
  if (!j || !m_running.load()) return;
  if (!m_engineJob.load()) {
    j->close();  // an attached script detaches: its hooks go, it trains on
    return;
  }
  if (m_stop.exchange(true) && m_busySince.load() != 0) {
    // Stop again while the step in progress has not ended: end it now.
    Q_EMIT notice(QStringLiteral("Stopping the engine process: the step in progress ends now."));
    killEngine("Stop was pressed twice during step " + std::to_string(m_stepsDone.load()) +
               ", so HookScope ended the step by stopping the engine process");
    return;
  }
  if (m_paused.load() || m_busySince.load() == 0) {
    j->pause();
    finishRun();
    return;
  }
  j->pause();
  Q_EMIT notice(QStringLiteral("Stopping after the step in progress… Stop again (Shift+F5) ends it now."));
}

void EngineAdapter::loadOperatorLibraries(const QStringList& paths) {
  m_libraries.clear();
  for (const QString& path : paths) {
    // The window links no LibTorch: each engine process loads the library before it checks and
    // loads its model, and says so when it cannot. Here only what can be told without loading it.
    const QFileInfo file(path);
    if (!file.isFile() || !file.isReadable()) {
      Q_EMIT libraryFailed(tr("%1: %2. Choose it again in Settings > Operator libraries.")
                               .arg(path, file.exists() ? tr("not a readable file") : tr("no such file")));
      continue;
    }
    m_libraries << path;
  }
}

void EngineAdapter::loadModel(const QString& path, bool trusted) {
  if (m_running.load()) {
    Q_EMIT loadFailed(QStringLiteral("Stop the run before opening another model."));
    return;
  }
  if (!m_watchdog) {
    m_watchdog = new QTimer(this);
    m_watchdog->setInterval(500);
    connect(m_watchdog, &QTimer::timeout, this, &EngineAdapter::checkStepTime);
    m_watchdog->start();
  }
  // One open at a time: a newer one replaces one still loading.
  m_loadCancel = true;
  if (m_loadThread.joinable()) m_loadThread.join();
  m_loadCancel = false;
  EngineOptions options;
  options.program = cliProgram().toStdString();
  options.model = path.toStdString();
  options.trust = trusted;
  for (const QString& library : m_libraries) options.libraries.push_back(library.toStdString());
  const int limit = m_stepTimeLimit.load();
  const auto capBytes = m_capBytes;
  Q_EMIT modelLoading(path);
  ModelFileInfo info;
  std::string identifyError;
  const bool checkpoint = identifyModelFile(options.model, &info, &identifyError) &&
                          (info.kind == ModelFileKind::Checkpoint || info.kind == ModelFileKind::SafeTensors);
  m_loadThread = std::thread([this, options, limit, capBytes, path, checkpoint] {
    if (checkpoint) {
      openCheckpoint(path, limit);
      return;
    }
    std::string message;
    bool needsTrust = false;
    auto store = std::make_shared<CaptureStore>(capBytes);
    // The engine checks the model's code before it loads it (it knows the operator libraries).
    std::shared_ptr<EngineProcess> engine =
        EngineProcess::start(options, store, [this] { return m_loadCancel.load(); },
                              limit > 0 ? limit * 1000 : -1, &message, &needsTrust);
    if (!engine) {
      if (needsTrust) {
        Q_EMIT trustNeeded(path, QString::fromStdString(message));
      } else {
        Q_EMIT loadFailed(QString::fromStdString(message));  // the open model stays as it was
      }
      return;
    }
    QMetaObject::invokeMethod(this, [this, engine, path] { adoptEngine(engine, path); }, Qt::QueuedConnection);
  });
}

void EngineAdapter::cancelLoad() { m_loadCancel = true; }

void EngineAdapter::adoptEngine(std::shared_ptr<EngineProcess> engine, const QString& path) {
  if (m_running.load()) {
    Q_EMIT loadFailed(QStringLiteral("Stop the run before opening another model."));
    return;  // the new engine ends with `engine`
  }
  auto session = engine->takeSession();
  if (!session) return;
  const EngineHello hello = *session->engine();
  const std::vector<ModuleInfo> modules = session->modules();
  std::shared_ptr<CaptureStore> store = session->store();
  // Reset weights opens the same file again: what was ticked stays ticked.
  std::vector<std::uint8_t> hooks(modules.size(), 0);
  if (auto previous = job(); previous && path == m_enginePath && previous->hooks().size() == hooks.size()) {
    hooks = previous->hooks();
  }
  endEngine();
  auto j = startJob(store, /*engine=*/true);
  auto ending = std::make_shared<std::atomic<bool>>(false);
  AttachJob* raw = j.get();
  j->setOnEnded([this, raw, ending, engine, path](int, const std::string& why) {
    if (ending->load()) return;
    engine->wait(3000);
    {
      std::lock_guard<std::mutex> lock(m_modelMutex);
      if (m_engineProcess == engine) m_engineProcess.reset();  // the job stays, for its captures
    }
    std::string killed;
    {
      std::lock_guard<std::mutex> lock(m_modelMutex);
      killed = std::move(m_killReason);
      m_killReason.clear();
    }
    const QString how = QString::fromStdString(engine->exitText());
    QString message = QStringLiteral("The engine process running %1 stopped").arg(QFileInfo(path).fileName());
    if (!killed.empty()) {
      message = QString::fromStdString(killed);
      message[0] = message[0].toUpper();
    } else {
      message += how.isEmpty() ? QStringLiteral(": %1").arg(QString::fromStdString(why)) : QStringLiteral(": it %1").arg(how);
    }
    message += QStringLiteral(". %1 steps had ended.").arg(raw->settledStep() + 1);
    // What went wrong in one line (not the last frame of a stack trace); the rest in its log.
    const QString said = QString::fromStdString(engine->failureText()).trimmed();
    if (!said.isEmpty() && engine->failed()) message += QStringLiteral("\n\nIt said: %1").arg(said);
    message += QStringLiteral("\n\nThe captures so far are kept: export them (Ctrl+E), or open the model again "
                              "(Run > Reset weights) to go on.");
    m_busySince = 0;
    m_running = false;
    m_paused = false;
    m_stop = false;
    Q_EMIT runStateChanged(false, false);
    Q_EMIT engineStopped(message);
  });
  j->setOnEngineEvent([this](int, const std::string& event, const std::string& message) {
    if (event == "paused") {
      // Stop's pause can reach the engine between steps, when no step is left to end the run.
      // Its `paused` comes after every step it ran, so the run is over here.
      if (m_running.load() && m_stop.load()) {
        m_busySince = 0;
        finishRun();
      }
      return;
    }
    if (event != "failed") return;
    // The configuration is sent again with the next Run or Step (on the engine thread, which owns it).
    QMetaObject::invokeMethod(this, [this] { m_configured = false; }, Qt::QueuedConnection);
    m_busySince = 0;
    Q_EMIT failed(QString::fromStdString(message));
    if (m_running.load()) finishRun();
  });
  j->pause();  // the engine waits for Run or Step
  j->setAllHooks(hooks);
  j->setBreakRules(m_breakRules.load());
  j->setRuleSettings(m_ruleSettings);
  std::string error;
  if (!j->add(std::move(session), &error)) {
    Q_EMIT loadFailed(QString::fromStdString(error));
    return;
  }
  {
    std::lock_guard<std::mutex> lock(m_modelMutex);
    m_job = j;
    m_engineProcess = engine;
  }
  m_engineEnding = ending;
  m_engineJob = true;
  m_enginePath = path;
  m_engineSha256 = hello.sha256;
  m_store = store;
  m_store->setCapBytes(m_capBytes);
  m_configured = false;
  m_stepsDone = 0;
  m_stop = false;
  m_paused = false;
  m_busySince = 0;
  m_interventions.clear();
  m_reviewAlerts.clear();
  m_configHistory.clear();
  ModelSummary summary;
  summary.path = path;
  summary.fileName = QFileInfo(path).fileName();
  summary.exampleInput = QString::fromStdString(hello.exampleInput);
  summary.modules = modules;
  summary.store = m_store;
  summary.hooks = hooks;
  summary.engineProcess = true;
  summary.confinement = QString::fromStdString(hello.confinement);
  Q_EMIT modelLoaded(summary);
}

void EngineAdapter::endEngine() {
  if (m_engineEnding) *m_engineEnding = true;
  std::shared_ptr<AttachJob> ended;
  std::shared_ptr<EngineProcess> process;
  {
    std::lock_guard<std::mutex> lock(m_modelMutex);
    if (!m_engineProcess) return;
    process = std::move(m_engineProcess);
    ended = m_job;  // kept as the open session's job until another replaces it
  }
  if (ended) ended->close();
  process->kill();
}

void EngineAdapter::checkStepTime() {
  const qint64 since = m_busySince.load();
  const int limit = m_stepTimeLimit.load();
  if (since == 0 || limit <= 0 || nowMs() - since < qint64(limit) * 1000) return;
  if (!engineOpen()) return;
  m_busySince = 0;
  Q_EMIT notice(QStringLiteral("Step %1 did not end within %2 s: stopping the engine process.")
                    .arg(m_stepsDone.load())
                    .arg(limit));
  killEngine("step " + std::to_string(m_stepsDone.load()) + " did not end within the step time limit of " +
             std::to_string(limit) + " s (Run > Step time limit), so HookScope stopped the engine process; the "
             "model's forward may loop forever");
}

void EngineAdapter::killEngine(const std::string& why) {
  std::shared_ptr<EngineProcess> process;
  {
    std::lock_guard<std::mutex> lock(m_modelMutex);
    process = m_engineProcess;
    m_killReason = why;
  }
  if (process) process->kill();  // the job's end reports it (engineStopped)
}

qint64 EngineAdapter::enginePid() const {
  std::lock_guard<std::mutex> lock(m_modelMutex);
  return m_engineProcess ? qint64(m_engineProcess->pid()) : -1;
}

void EngineAdapter::openCapture(const QString& dir) { openCaptureOf(dir, QString()); }

void EngineAdapter::openCheckpoint(const QString& path, int limitSeconds) {
  // A checkpoint has no code: its tensors' statistics and histograms are captured once, by
  // `hookscope-cli capture` (weights_only, in the confined Python engine), and shown read-only.
  QTemporaryDir scratch;
  const QString out = scratch.filePath(QStringLiteral("weights"));
  QProcess capture;
  capture.start(cliProgram(), {QStringLiteral("capture"), path, QStringLiteral("--out"), out, QStringLiteral("--steps"),
                               QStringLiteral("1"), QStringLiteral("--kinds"), QStringLiteral("param"),
                               QStringLiteral("--hook"), QStringLiteral("*")});
  const bool ended = capture.waitForFinished(limitSeconds > 0 ? limitSeconds * 1000 : -1);
  if (!ended || capture.exitStatus() != QProcess::NormalExit || capture.exitCode() != 0) {
    if (!ended) capture.kill();
    QString why = cliMessage(capture.readAllStandardError());
    if (why.isEmpty()) why = capture.errorString();
    Q_EMIT loadFailed(QStringLiteral("%1 could not be read as a checkpoint: %2").arg(QFileInfo(path).fileName(), why));
    return;
  }
  QMetaObject::invokeMethod(this, [this, out, path] {
    openCaptureOf(out, path);
  }, Qt::BlockingQueuedConnection);  // before the scratch folder goes
}

void EngineAdapter::openCaptureOf(const QString& dir, const QString& checkpoint) {
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
  summary.path = checkpoint.isEmpty() ? dir : checkpoint;
  summary.fileName = checkpoint.isEmpty() ? QString::fromStdString(data.manifest.modelFile) + QStringLiteral(" (capture)")
                                          : QFileInfo(checkpoint).fileName() + QStringLiteral(" (checkpoint, read-only)");
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
  if (!checkpoint.isEmpty()) {
    // A checkpoint's tree: the tensors are the modules' parameters, counted from their series;
    // a module that holds none (the root, a container) has nothing hooked.
    for (auto& info : summary.modules) info.typeName = "";
    for (const auto& key : data.store->seriesKeys()) {
      const auto points = data.store->series(key);
      const auto found = index.find(ownerModule(key));
      if (key.kind != CaptureKind::Param || points.empty() || found == index.end()) continue;
      auto& owner = summary.modules[std::size_t(found->second)];
      owner.ownParams += points.front().stats.numel;
      owner.typeName = "weights";
    }
    for (std::size_t i = summary.modules.size(); i-- > 0;) {
      auto& info = summary.modules[i];
      info.totalParams += info.ownParams;
      if (info.parent >= 0) summary.modules[std::size_t(info.parent)].totalParams += info.totalParams;
      if (info.ownParams == 0) summary.hooks[i] = 0;
    }
  }
  summary.alerts = data.alerts;
  summary.interventions = data.manifest.interventions;
  summary.worldSize = std::max<int>(int(data.manifest.ranks.size()), int(data.store->ranks().size()));
  endEngine();
  std::shared_ptr<AttachJob> ended;
  {
    std::lock_guard<std::mutex> lock(m_modelMutex);
    ended = std::move(m_job);
  }
  m_store = data.store;
  m_configured = false;
  m_engineJob = false;
  m_interventions = data.manifest.interventions;
  m_reviewAlerts = std::move(data.alerts);
  m_reviewManifest = data.manifest;
  Q_EMIT modelLoaded(summary);
}

void EngineAdapter::setGradientIntervention(int module, GradientIntervention intervention) {
  if (auto j = job()) j->setGradientIntervention(module, intervention);
}

void EngineAdapter::setOutputIntervention(int module, OutputIntervention intervention) {
  if (auto j = job()) j->setOutputIntervention(module, intervention);
}

void EngineAdapter::setHooks(int module, quint8 mask) {
  if (auto j = job()) j->setHooks(module, mask);
}

bool EngineAdapter::prepare(const RunConfig& config) {
  auto j = job();
  if (!j || !engineOpen()) {
    Q_EMIT failed(j ? QStringLiteral("The engine process has stopped: open the model again (Run > Reset weights).")
                    : QStringLiteral("Open a model first (File > Open)."));
    return false;
  }
  if (!m_configured || config != m_config) {
    j->configure(runConfigText(config));  // a configuration the model rejects comes back as failed()
    m_config = config;
    m_configured = true;
    logConfig(&m_configHistory, config, m_stepsDone.load());
  }
  return true;
}

void EngineAdapter::run(const RunConfig& config, qint64 steps) {
  if (job() && !m_engineJob.load()) {
    if (m_running.load()) setPaused(false);  // an attached script's own loop runs; the window resumes it
    return;
  }
  if (m_running.load() || !prepare(config)) return;
  m_remaining = steps > 0 ? steps : -1;
  m_stop = false;
  m_paused = false;
  m_running = true;
  m_busySince = nowMs();
  Q_EMIT runStateChanged(true, false);
  auto j = job();
  if (steps > 0) {
    j->step(int(std::min<qint64>(steps, 1 << 30)));
  } else {
    j->resume();
  }
}

void EngineAdapter::stepOnce(const RunConfig& config) {
  if (m_running.load() && !m_paused.load()) return;
  auto j = job();
  if (j && !m_engineJob.load()) {
    if (m_running.load()) {
      j->step(1);  // every rank runs one step and pauses again
      Q_EMIT runStateChanged(true, false);
    }
    return;
  }
  if (!prepare(config)) return;
  m_busySince = nowMs();
  j->step(1);
}

void EngineAdapter::finishRun() {
  m_running = false;
  m_paused = false;
  m_stop = false;
  m_remaining = 0;
  Q_EMIT runStateChanged(false, false);
}

void EngineAdapter::resetWeights() {
  if (!m_engineJob || m_enginePath.isEmpty()) return;
  loadModel(m_enginePath, /*trusted=*/true);  // the user opened it already
}

void EngineAdapter::setRuleSettings(const RuleSettings& settings) {
  m_ruleSettings = settings;
  if (auto j = job()) j->setRuleSettings(settings);
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
  auto j = job();
  if (j && !m_engineJob) {
    exportAttached(dir, overwrite, interrupted);
    return;
  }
  ExportManifest manifest;
  std::vector<Alert> alerts;
  if (j) {
    // A model file run by an engine process: the job's record, told as a model file's.
    manifest = j->modelFileManifest(QFileInfo(m_enginePath).fileName().toStdString(), m_engineSha256, m_configHistory);
    alerts = j->alerts();
  } else {
    // An export reopened: written again as it was.
    manifest = m_reviewManifest;
    manifest.thinning = m_store->thinning();
    manifest.memoryCapBytes = m_store->capBytes();
    alerts = m_reviewAlerts;
  }
  manifest.hookscopeVersion = HOOKSCOPE_VERSION;
  manifest.interrupted = interrupted.toStdString();
  ExportOptions options;
  options.overwrite = overwrite;
  options.extraFiles = {{"alerts.csv", alertsCsv(alerts)}};
  std::string error;
  writeExport(dir.toStdString(), manifest, *m_store, {}, options, &error);
  Q_EMIT exportFinished(dir, QString::fromStdString(error));
}
