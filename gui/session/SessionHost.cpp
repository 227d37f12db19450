#include "session/SessionHost.h"

#include "files/ModelFileKind.h"
#include "session/AttachedJobSession.h"
#include "session/CliProcess.h"
#include "session/ModelFileSession.h"
#include "session/ReviewSession.h"
#include "session/ScriptListener.h"
#include "links/AttachJob.h"
#include "links/EngineProcess.h"

#include <fnmatch.h>

#include <QFileInfo>
#include <QMetaObject>
#include <QProcess>
#include <QTemporaryDir>

#include <algorithm>
#include <utility>

using namespace hookscope;

SessionHost::SessionHost(QObject* parent) : QObject(parent), m_context(new QObject) {
  registerSessionTypes();
  m_context->moveToThread(&m_thread);
  connect(&m_thread, &QThread::finished, m_context, &QObject::deleteLater);
  m_thread.setObjectName(QStringLiteral("HookScope sessions"));
  m_thread.start();
}

SessionHost::~SessionHost() {
  m_closing = true;
  QMetaObject::invokeMethod(m_context, [this] {
    m_loadCancel = true;
    if (m_loadThread.joinable()) m_loadThread.join();
    if (m_listener) m_listener->stop(/*endJob=*/true);
    std::unique_ptr<Session> ended = std::move(m_session);
    if (ended) ended->disconnect(this);
    ended.reset();       // scripts detach and train on; an engine process ends
    m_listener.reset();  // its thread ends once the job it waited on has
  }, Qt::BlockingQueuedConnection);
  m_thread.quit();
  m_thread.wait();
}

void SessionHost::post(std::function<void()> work) {
  QMetaObject::invokeMethod(m_context, std::move(work), Qt::QueuedConnection);
}

RunState SessionHost::state() const {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  return m_state;
}

void SessionHost::updateState(Session* from, const RunState& state) {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  if (from != m_current) return;  // a session that is being replaced
  RunState merged = state;
  merged.loading = m_state.loading;
  if (merged == m_state) return;
  m_state = merged;
  publishLocked();
}

void SessionHost::updateSettled(Session* from, qint64 step) {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  if (from != m_current || step <= m_settled) return;
  m_settled = step;
  publishLocked();
}

void SessionHost::rankJoined(Session* from, int rank, const QString& who) {
  {
    std::lock_guard<std::mutex> lock(m_stateMutex);
    if (from && from != m_current) return;  // a session that is being replaced
    m_ranksAttached.insert(rank);
    m_ranksEnded.remove(rank);
    publishLocked();
  }
  Q_EMIT rankAttached(rank, who);
}

void SessionHost::rankLeft(Session* from, int rank, const QString& why) {
  {
    std::lock_guard<std::mutex> lock(m_stateMutex);
    if (from != m_current) return;
    m_ranksEnded.insert(rank, why);
    publishLocked();
  }
  Q_EMIT rankEnded(rank, why);
}

void SessionHost::setLoading(bool loading) {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  if (m_state.loading == loading) return;
  m_state.loading = loading;
  publishLocked();
}

void SessionHost::publishLocked(bool opened) {
  SessionView view;
  view.kind = m_current ? m_current->kind() : SessionKind::Nothing;
  view.summary = m_summary;
  view.state = m_state;
  view.settledStep = m_settled;
  view.ranksAttached = m_ranksAttached;
  view.ranksEnded = m_ranksEnded;
  view.scriptEnded = m_scriptEnded;
  view.can = m_current ? m_current->abilities(m_state) : SessionAbilities::nothingOpen();
  if (m_state.loading) {  // Stop gives up opening; nothing else opens meanwhile
    view.can.stop = true;
    view.can.open = false;
  }
  // Posted under the lock: values reach the window in the order they were made, and after what
  // this thread emitted before (a step's captures before the step that settles them).
  QMetaObject::invokeMethod(this, [this, view, opened] {
    const SessionView before = std::exchange(m_view, view);
    Q_EMIT viewChanged(m_view, before);
    if (opened) Q_EMIT sessionOpened(m_view);
  }, Qt::QueuedConnection);
}

void SessionHost::replace(std::unique_ptr<Session> session) {
  Session* raw = session.get();
  // Direct: a session reports from its own or a rank's thread; the window gets them queued.
  const auto direct = Qt::DirectConnection;
  connect(raw, &Session::stateChanged, this, [this, raw](const RunState& s) { updateState(raw, s); }, direct);
  connect(raw, &Session::stepFinished, this, [this, raw](const StepSummary& step) {
    updateSettled(raw, step.finishedStep);
    Q_EMIT stepFinished(step);
  }, direct);
  connect(raw, &Session::jobStepSettled, this, [this, raw](const StepSummary& step) {
    updateSettled(raw, step.finishedStep);
    Q_EMIT jobStepSettled(step);
  }, direct);
  connect(raw, &Session::notice, this, &SessionHost::notice, direct);
  connect(raw, &Session::failed, this, &SessionHost::failed, direct);
  connect(raw, &Session::engineStopped, this, &SessionHost::engineStopped, direct);
  connect(raw, &Session::rankAttached, this, [this, raw](int rank, const QString& who) { rankJoined(raw, rank, who); }, direct);
  connect(raw, &Session::rankEnded, this, [this, raw](int rank, const QString& why) { rankLeft(raw, rank, why); }, direct);
  raw->setMemoryCap(m_capBytes);
  raw->setRuleSettings(m_ruleSettings);
  raw->setBreakRules(m_breakRules.load());
  raw->setStepTimeLimit(m_stepTimeLimit.load());
  std::unique_ptr<Session> ended = std::move(m_session);
  m_session = std::move(session);
  if (ended) ended->disconnect(this);
  ended.reset();  // its job ends here: an engine process stops, scripts detach
  // With the state it opened in: the window never sees the new session in the state of the one
  // before (an attached script running while the window still thinks nothing runs).
  std::lock_guard<std::mutex> lock(m_stateMutex);
  m_current = raw;
  m_state = raw->state();
  m_state.loading = false;
  m_summary = std::make_shared<const SessionSummary>(raw->summary());
  m_settled = -1;
  m_ranksAttached.clear();
  m_ranksEnded.clear();
  m_scriptEnded.clear();
  publishLocked(/*opened=*/true);
}

void SessionHost::openModel(const QString& path, bool trusted) {
  post([this, path, trusted] {
    if (state().running()) {
      Q_EMIT openFailed(QStringLiteral("Stop the run before opening another model."));
      return;
    }
    // One open at a time: a newer one replaces one still opening.
    m_loadCancel = true;
    if (m_loadThread.joinable()) m_loadThread.join();
    m_loadCancel = false;
    EngineOptions options;
    options.program = cliProgram().toStdString();
    options.model = path.toStdString();
    options.trust = trusted;
    for (const QString& library : m_libraries) options.libraries.push_back(library.toStdString());
    const int limit = m_openTimeLimit.load();
    const std::size_t capBytes = m_capBytes.load();
    setLoading(true);
    Q_EMIT opening(path);
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
          EngineProcess::start(options, store, [this] { return m_loadCancel.load(); }, limit > 0 ? limit * 1000 : -1,
                               &message, &needsTrust, "Run > Open time limit");
      if (!engine) {
        setLoading(false);  // the open session stays as it was
        if (needsTrust) {
          Q_EMIT trustNeeded(path, QString::fromStdString(message));
        } else {
          Q_EMIT openFailed(QString::fromStdString(message));
        }
        return;
      }
      post([this, engine, path] { adoptEngine(engine, path); });
    });
  });
}

void SessionHost::cancelOpen() { m_loadCancel = true; }

void SessionHost::adoptEngine(std::shared_ptr<EngineProcess> engine, const QString& path) {
  if (state().running()) {
    setLoading(false);
    Q_EMIT openFailed(QStringLiteral("Stop the run before opening another model."));
    return;  // the new engine ends with `engine`
  }
  ModelFileSession::Settings settings;
  settings.breakRules = m_breakRules.load();
  settings.rules = m_ruleSettings;
  settings.stepTimeLimit = m_stepTimeLimit.load();
  // Reset weights opens the same file again: what was ticked stays ticked.
  if (m_session && m_session->kind() == SessionKind::ModelFile && m_session->summary().path == path) {
    settings.hooks = m_session->hooks();
  }
  QString error;
  auto session = ModelFileSession::open(std::move(engine), path, settings, &error);
  if (!session) {
    setLoading(false);
    Q_EMIT openFailed(error);
    return;
  }
  replace(std::move(session));
}

void SessionHost::openCheckpoint(const QString& path, int limitSeconds) {
  // A checkpoint has no code: its tensors' statistics and histograms are captured once, by
  // `hookscope-cli capture` (weights_only, in the confined Python engine), and shown read-only.
  auto scratch = std::make_shared<QTemporaryDir>();
  const QString out = scratch->filePath(QStringLiteral("weights"));
  QProcess capture;
  capture.start(cliProgram(), {QStringLiteral("capture"), path, QStringLiteral("--out"), out, QStringLiteral("--steps"),
                               QStringLiteral("1"), QStringLiteral("--kinds"), QStringLiteral("param"),
                               QStringLiteral("--hook"), QStringLiteral("*")});
  const bool ended = capture.waitForFinished(limitSeconds > 0 ? limitSeconds * 1000 : -1);
  if (!ended || capture.exitStatus() != QProcess::NormalExit || capture.exitCode() != 0) {
    if (!ended) capture.kill();
    QString why = cliMessage(capture.readAllStandardError());
    if (why.isEmpty()) why = capture.errorString();
    setLoading(false);
    Q_EMIT openFailed(QStringLiteral("%1 could not be read as a checkpoint: %2").arg(QFileInfo(path).fileName(), why));
    return;
  }
  // The scratch folder goes once the review has read it (this thread does not wait: the session
  // thread may be waiting for it).
  post([this, out, path, scratch] { openReview(out, path); });
}

void SessionHost::openCapture(const QString& dir) {
  post([this, dir] { openReview(dir, QString()); });
}

void SessionHost::openReview(const QString& dir, const QString& checkpoint) {
  if (state().running()) {
    setLoading(false);
    Q_EMIT openFailed(QStringLiteral("Stop the run before opening a capture."));
    return;
  }
  QString error;
  auto session = ReviewSession::open(dir, checkpoint, &error, m_capBytes);
  if (!session) {
    setLoading(false);
    Q_EMIT openFailed(error);
    return;
  }
  replace(std::move(session));
}

void SessionHost::resetWeights() {
  post([this] {
    if (!m_session || !m_session->abilities(m_session->state()).reset) return;
    const QString path = m_session->summary().path;
    openModel(path, /*trusted=*/true);  // the user opened it already
  });
}

void SessionHost::listen(const QString& address, const QStringList& hooks) {
  post([this, address, hooks] { startListening(address, hooks); });
}

namespace {

// The first script's hooks with every module that matches one of `patterns` hooked for
// activations and gradients; a pattern that matches nothing is said on the terminal.
std::vector<std::uint8_t> hooksMatching(const QStringList& patterns, const ScriptRecord& script,
                                        const std::vector<ModuleInfo>& modules, std::vector<std::uint8_t> hooks) {
  hooks.resize(modules.size(), 0);
  const std::uint8_t kinds = kindBit(CaptureKind::Activation) | kindBit(CaptureKind::Gradient);
  for (const QString& pattern : patterns) {
    const QByteArray text = pattern.toUtf8();
    bool any = false;
    for (std::size_t i = 0; i < modules.size(); ++i) {
      if (::fnmatch(text.constData(), modules[i].path.c_str(), 0) != 0) continue;
      hooks[i] |= kinds;
      any = true;
    }
    if (!any) {
      qWarning("hookscope: --hook '%s' matches no module of %s (its modules are named like '%s')", text.constData(),
               script.name.c_str(), modules.size() > 1 ? modules[1].path.c_str() : "");
    }
  }
  return hooks;
}

} // namespace

void SessionHost::startListening(const QString& address, const QStringList& hookPatterns) {
  if (m_listener && m_listener->waiting()) {
    Q_EMIT listening(m_listener->address());
    return;
  }
  if (state().running()) {
    Q_EMIT listenFailed(m_session && isAttachedKind(m_session->kind())
                            ? QStringLiteral("A script is attached: Stop (detach) it before attaching another.")
                            : QStringLiteral("Stop the run before attaching a training script."));
    return;
  }
  m_listener.reset();  // the previous script's, finished
  auto listener = std::make_unique<ScriptListener>();
  const auto direct = Qt::DirectConnection;
  connect(listener.get(), &ScriptListener::refused, this, &SessionHost::attachRefused, direct);
  connect(listener.get(), &ScriptListener::rankAttached, this,
          [this](int rank, const QString& who) { rankJoined(nullptr, rank, who); }, direct);
  connect(listener.get(), &ScriptListener::jobOver, this, [this](const QString& reason) {
    // Said on the listener's thread; the open session changes on the host's queue only, where
    // every other change to it is made (issue 48: one owner of what is open).
    post([this, reason] {
      if (m_closing) return;
      if (m_session) m_session->scriptsLeft();
      {
        std::lock_guard<std::mutex> lock(m_stateMutex);
        m_scriptEnded = reason;
        publishLocked();
      }
      Q_EMIT scriptDetached(reason);
    });
  }, direct);
  auto onFirst = [this, hookPatterns](std::shared_ptr<AttachJob> job, std::shared_ptr<CaptureStore> store,
                                      const ScriptRecord& script, const std::vector<ModuleInfo>& modules,
                                      const std::vector<std::uint8_t>& scriptHooks) {
    // The first script replaces the open session before its rank is served (not while the host
    // ends: its thread is busy ending, and the job ends with the listener).
    if (m_closing) return;
    const auto hooks = hookPatterns.isEmpty() ? scriptHooks : hooksMatching(hookPatterns, script, modules, scriptHooks);
    if (!hookPatterns.isEmpty()) job->setAllHooks(hooks);  // for every rank, from its first step
    QMetaObject::invokeMethod(m_context, [&] {
      replace(std::make_unique<AttachedJobSession>(job, store, script, modules, hooks));
    }, Qt::BlockingQueuedConnection);
  };
  QString error;
  if (!listener->start(address, m_capBytes, m_breakRules.load(), onFirst, &error)) {
    Q_EMIT listenFailed(error);
    return;
  }
  m_listener = std::move(listener);
  Q_EMIT listening(m_listener->address());
}

void SessionHost::stopListening() {
  post([this] {
    if (m_listener) m_listener->stop();  // its thread ends by itself; a script attached stays
  });
}

void SessionHost::invoke(std::function<void(Session&)> work) {
  post([this, work = std::move(work)] {
    if (m_session) work(*m_session);
  });
}

void SessionHost::setMemoryCap(qint64 bytes) {
  post([this, bytes] {
    m_capBytes = std::size_t(std::max<qint64>(bytes, 1 << 20));
    if (m_session) m_session->setMemoryCap(m_capBytes);
  });
}

void SessionHost::setRuleSettings(const RuleSettings& settings) {
  post([this, settings] {
    m_ruleSettings = settings;
    if (m_session) m_session->setRuleSettings(settings);
  });
}

void SessionHost::setBreakRules(quint32 mask) {
  m_breakRules = mask;
  post([this, mask] {
    if (m_session) m_session->setBreakRules(mask);
  });
}

void SessionHost::setStepTimeLimit(int seconds) {
  m_stepTimeLimit = seconds;
  post([this, seconds] {
    if (m_session) m_session->setStepTimeLimit(seconds);
  });
}

void SessionHost::setOperatorLibraries(const QStringList& paths) {
  post([this, paths] {
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
  });
}

void SessionHost::exportCaptures(const QString& dir, bool overwrite, const QString& interrupted) {
  post([this, dir, overwrite, interrupted] {
    if (!m_session || !m_session->summary().store) {
      Q_EMIT exportFinished(dir, QStringLiteral("Nothing to export: open a model and run some steps."));
      return;
    }
    Q_EMIT exportFinished(dir, m_session->exportTo(dir, overwrite, interrupted));
  });
}
