#include "session/ModelFileSession.h"

#include "files/ExportFolder.h"
#include "links/AttachJob.h"
#include "links/EngineProcess.h"

#include <QFileInfo>
#include <QTimer>

#include <algorithm>
#include <chrono>

using namespace hookscope;

std::unique_ptr<ModelFileSession> ModelFileSession::open(std::shared_ptr<EngineProcess> engine, const QString& path,
                                                         const Settings& settings, QString* error) {
  auto connection = engine->takeLink();
  if (!connection) {
    *error = QStringLiteral("The engine process for %1 has no connection.").arg(QFileInfo(path).fileName());
    return nullptr;
  }
  const EngineHello hello = *connection->engine();
  SessionSummary summary;
  summary.path = path;
  summary.fileName = QFileInfo(path).fileName();
  summary.exampleInput = QString::fromStdString(hello.exampleInput);
  summary.modules = connection->modules();
  summary.store = connection->store();
  summary.hooks = settings.hooks.size() == summary.modules.size() ? settings.hooks
                                                                  : std::vector<std::uint8_t>(summary.modules.size(), 0);
  summary.confinement = QString::fromStdString(hello.confinement);
  auto job = std::make_shared<AttachJob>(summary.store);
  std::unique_ptr<ModelFileSession> session(
      new ModelFileSession(summary, job, engine, path, hello.sha256, settings.stepTimeLimit));
  job->pause();  // the engine waits for Run or Step
  job->setAllHooks(summary.hooks);
  job->setBreakRules(settings.breakRules);
  job->setRuleSettings(settings.rules);
  std::string message;
  if (!job->add(std::move(connection), &message)) {
    *error = QString::fromStdString(message);
    return nullptr;
  }
  session->changeState([&](RunState& s) { s.enginePid = qint64(engine->pid()); });
  return session;
}

ModelFileSession::ModelFileSession(SessionSummary summary, std::shared_ptr<AttachJob> job,
                                   std::shared_ptr<EngineProcess> engine, const QString& path, std::string sha256,
                                   int stepTimeLimit)
    : JobSession(std::move(summary), std::move(job), /*engine=*/true),
      m_engine(std::move(engine)),
      m_path(path),
      m_sha256(std::move(sha256)),
      m_stepTimeLimit(stepTimeLimit) {
  m_job->setOnEnded([this](int, const std::string& why) { engineEnded(why); });
  m_job->setOnEngineEvent([this](int, const std::string& event, const std::string& message) {
    engineEvent(event, message);
  });
  m_watchdog = new QTimer(this);
  m_watchdog->setInterval(500);
  connect(m_watchdog, &QTimer::timeout, this, &ModelFileSession::checkStepTime);
  m_watchdog->start();
}

ModelFileSession::~ModelFileSession() {
  m_ending = true;  // ended on purpose: no engineStopped
  std::shared_ptr<EngineProcess> process;
  {
    std::lock_guard<std::mutex> lock(m_engineMutex);
    process = std::move(m_engine);
  }
  if (m_job) m_job->close();
  if (process) process->kill();
  endJob();
}

qint64 ModelFileSession::nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool ModelFileSession::engineOpen() const {
  std::lock_guard<std::mutex> lock(m_engineMutex);
  return m_engine != nullptr;
}

void ModelFileSession::engineEnded(const std::string& why) {
  if (m_ending.load()) return;
  std::shared_ptr<EngineProcess> engine;
  std::string killed;
  {
    std::lock_guard<std::mutex> lock(m_engineMutex);
    engine = m_engine;
    killed = std::move(m_killReason);
    m_killReason.clear();
  }
  if (!engine) return;
  engine->wait(3000);
  {
    std::lock_guard<std::mutex> lock(m_engineMutex);
    if (m_engine == engine) m_engine.reset();  // the job stays, for its captures
  }
  const QString how = QString::fromStdString(engine->exitText());
  QString message = QStringLiteral("The engine process running %1 stopped").arg(QFileInfo(m_path).fileName());
  if (!killed.empty()) {
    message = QString::fromStdString(killed);
    message[0] = message[0].toUpper();
  } else {
    message += how.isEmpty() ? QStringLiteral(": %1").arg(QString::fromStdString(why)) : QStringLiteral(": it %1").arg(how);
  }
  message += QStringLiteral(". %1 steps had ended.").arg(m_job->settledStep() + 1);
  // What went wrong in one line (not the last frame of a stack trace); the rest in its log.
  const QString said = QString::fromStdString(engine->failureText()).trimmed();
  if (!said.isEmpty() && engine->failed()) message += QStringLiteral("\n\nIt said: %1").arg(said);
  message += QStringLiteral("\n\nThe captures so far are kept: export them (Ctrl+E), or open the model again "
                            "(Run > Reset weights) to go on.");
  m_busySince = 0;
  m_stop = false;
  changeState([](RunState& s) {
    s.phase = RunState::Phase::Idle;
    s.engineStopped = true;
    s.enginePid = -1;
  });
  Q_EMIT engineStopped(message);
}

void ModelFileSession::engineEvent(const std::string& event, const std::string& message) {
  if (event == "paused") {
    // Stop's pause can reach the engine between steps, when no step is left to end the run.
    // Its `paused` comes after every step it ran, so the run is over here.
    if (state().running() && m_stop.load()) {
      m_busySince = 0;
      finishRun();
    }
    return;
  }
  if (event != "failed") return;
  m_configured = false;  // the configuration is sent again with the next Run or Step
  m_busySince = 0;
  Q_EMIT failed(QString::fromStdString(message));
  if (state().running()) finishRun();
}

void ModelFileSession::afterStep(const AttachedStep&) {
  // The window's run counts its steps; Stop ends it after the step.
  if (!state().running()) {
    m_busySince = 0;  // a single Step
    return;
  }
  qint64 left = m_remaining.load();
  if (left > 0) left = --m_remaining;
  if (m_stop.load() || left == 0) {
    m_busySince = 0;
    finishRun();
  } else {
    m_busySince = state().paused() ? 0 : nowMs();
  }
}

void ModelFileSession::breakPaused() {
  m_busySince = 0;
  JobSession::breakPaused();
}

bool ModelFileSession::prepare(const RunConfig& config) {
  if (!engineOpen()) {
    Q_EMIT failed(QStringLiteral("The engine process has stopped: open the model again (Run > Reset weights)."));
    return false;
  }
  if (!m_configured || config != m_config) {
    m_job->configure(runConfigText(config));  // a configuration the model rejects comes back as failed()
    m_config = config;
    m_configured = true;
    logConfig(&m_configHistory, config, state().stepsDone);
  }
  return true;
}

void ModelFileSession::run(const RunConfig& config, qint64 steps) {
  if (state().running() || !prepare(config)) return;
  m_remaining = steps > 0 ? steps : -1;
  m_stop = false;
  m_busySince = nowMs();
  changeState([](RunState& s) { s.phase = RunState::Phase::Running; });
  if (steps > 0) {
    m_job->step(int(std::min<qint64>(steps, 1 << 30)));
  } else {
    m_job->resume();
  }
}

void ModelFileSession::stepOnce(const RunConfig& config) {
  const RunState now = state();
  if ((now.running() && !now.paused()) || !prepare(config)) return;
  m_busySince = nowMs();
  m_job->step(1);
}

void ModelFileSession::resume(const RunConfig& config) {
  if (!state().paused() || !prepare(config)) return;
  setPaused(false);
}

void ModelFileSession::setPaused(bool paused) {
  if (!state().running()) return;
  if (paused) {
    m_job->pause();
  } else if (engineOpen() && m_remaining.load() > 0) {
    m_busySince = nowMs();
    m_job->step(int(std::min<qint64>(m_remaining.load(), 1 << 30)));  // the rest of the run's steps
  } else {
    if (engineOpen()) m_busySince = nowMs();
    m_job->resume();
  }
  changeState([paused](RunState& s) { s.phase = paused ? RunState::Phase::Paused : RunState::Phase::Running; });
}

void ModelFileSession::requestStop() {
  if (!state().running()) return;
  if (m_stop.exchange(true) && m_busySince.load() != 0) {
    // Stop again while the step in progress has not ended: end it now.
    Q_EMIT notice(QStringLiteral("Stopping the engine process: the step in progress ends now."));
    killEngine("Stop was pressed twice during step " + std::to_string(state().stepsDone) +
               ", so HookScope ended the step by stopping the engine process");
    return;
  }
  m_job->pause();
  if (state().paused() || m_busySince.load() == 0) {
    finishRun();
    return;
  }
  Q_EMIT notice(QStringLiteral("Stopping after the step in progress… Stop again (Shift+F5) ends it now."));
}

void ModelFileSession::finishRun() {
  m_stop = false;
  m_remaining = 0;
  changeState([](RunState& s) { s.phase = RunState::Phase::Idle; });
}

void ModelFileSession::checkStepTime() {
  const qint64 since = m_busySince.load();
  const int limit = m_stepTimeLimit.load();
  if (since == 0 || limit <= 0 || nowMs() - since < qint64(limit) * 1000) return;
  if (!engineOpen()) return;
  m_busySince = 0;
  const qint64 step = state().stepsDone;
  Q_EMIT notice(QStringLiteral("Step %1 did not end within %2 s: stopping the engine process.").arg(step).arg(limit));
  killEngine("step " + std::to_string(step) + " did not end within the step time limit of " + std::to_string(limit) +
             " s (Run > Step time limit), so HookScope stopped the engine process; the model's forward may loop "
             "forever");
}

void ModelFileSession::killEngine(const std::string& why) {
  std::shared_ptr<EngineProcess> process;
  {
    std::lock_guard<std::mutex> lock(m_engineMutex);
    process = m_engine;
    m_killReason = why;
  }
  if (process) process->kill();  // the job's end reports it (engineStopped)
}

QString ModelFileSession::exportTo(const QString& dir, bool overwrite, const QString& interrupted) {
  // A model file run by an engine process: the job's record, told as a model file's.
  ExportManifest manifest =
      m_job->modelFileManifest(QFileInfo(m_path).fileName().toStdString(), m_sha256, m_configHistory);
  manifest.hookscopeVersion = HOOKSCOPE_VERSION;
  return writeExport(std::move(manifest), dir, overwrite, interrupted);
}

SessionAbilities ModelFileSession::abilities(const RunState& state) const {
  SessionAbilities can = Session::abilities(state);
  can.run = can.step = !state.running() || state.paused();
  can.pause = state.running() && !state.paused();
  can.reset = !state.running();
  return can;
}
