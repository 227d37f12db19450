// EngineAdapter's side for attached scripts: listening, the ranks of a job, their export.
#include "EngineAdapter.h"

#include "sessions/AttachJob.h"
#include "wire/AttachListener.h"
#include "files/ExportFolder.h"

#include <QMetaObject>

#include <algorithm>
#include <cmath>
#include <map>

using namespace hookscope;

namespace {

QString describeScript(const ScriptRecord& script) {
  return QStringLiteral("%1 (pid %2 on %3, PyTorch %4, %5)")
      .arg(QString::fromStdString(script.name))
      .arg(script.pid)
      .arg(QString::fromStdString(script.host), QString::fromStdString(script.torch),
           QString::fromStdString(script.device));
}

/// "0-3, 5, 7" for ranks 0, 1, 2, 3, 5, 7 (ascending).
std::string rankList(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(ranks[i]);
    if (j > i) out += (j == i + 1 ? ", " : "-") + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

} // namespace

std::shared_ptr<AttachJob> EngineAdapter::job() const {
  std::lock_guard<std::mutex> lock(m_modelMutex);
  return m_job;
}

void EngineAdapter::listen(const QString& address) {
  if (m_listener) {
    Q_EMIT listening(QString::fromStdString(m_listener->address()));
    return;
  }
  if (auto j = job(); j && m_running.load()) {
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

std::shared_ptr<AttachJob> EngineAdapter::startJob(std::shared_ptr<CaptureStore> store, bool engine) {
  auto job = std::make_shared<AttachJob>(std::move(store));
  AttachJob* raw = job.get();  // the job outlives its rank threads, which call these
  job->setOnStep([this, raw, engine](int rank, const AttachedStep& step) {
    StepSummary summary;
    summary.rank = rank;
    summary.result.step = step.step;
    const auto scalar = [&](const char* name) {
      const auto it = step.scalars.find(name);
      return it == step.scalars.end() ? std::nan("") : it->second;
    };
    summary.result.loss = scalar("loss");
    summary.result.lossFinite = !step.scalars.count("loss") || std::isfinite(summary.result.loss);
    summary.result.totalMs = step.seconds * 1e3;
    if (engine) {  // the engine times its own parts
      summary.result.totalMs = scalar("step_ms");
      summary.result.forwardMs = scalar("forward_ms");
      summary.result.backwardMs = scalar("backward_ms");
      summary.result.optimizerMs = scalar("optimizer_ms");
      summary.result.captureMs = scalar("capture_ms");
    }
    summary.finishedStep = raw->settledStep();
    summary.shapes = step.shapes;
    summary.alerts = step.alerts;  // the break, if any, is the job's: jobStepSettled
    qint64 done = m_stepsDone.load();
    while (done < step.step + 1 && !m_stepsDone.compare_exchange_weak(done, step.step + 1)) {
    }
    Q_EMIT stepFinished(summary);
    if (!engine) {
      m_paused = raw->paused();
      Q_EMIT runStateChanged(true, m_paused.load());
      return;
    }
    // A model file's run: its steps are counted here, and Stop ends it after the step.
    if (!m_running.load()) {
      m_busySince = 0;  // a single Step
      return;
    }
    qint64 left = m_remaining.load();
    if (left > 0) left = --m_remaining;
    if (m_stop.load() || left == 0) {
      m_busySince = 0;
      finishRun();
    } else {
      m_busySince = m_paused.load() ? 0 : nowMs();
    }
  });
  // Runs under the job's lock: it only reports.
  // Also when the last ranks leave: the steps they settle then get no stepFinished.
  job->setOnSettled([this](std::int64_t step, const std::vector<Alert>& alerts, const std::optional<Alert>& breakAlert) {
    StepSummary summary;
    summary.result.step = step;
    summary.finishedStep = step;
    summary.alerts = alerts;
    summary.breakAlert = breakAlert;
    if (breakAlert) {
      summary.rank = breakAlert->rank;
      // Paused before the window hears of the break: a Step it sends on hearing it must find
      // the run paused (under load this thread could otherwise be preempted between the two).
      m_busySince = 0;
      m_paused = true;
    }
    Q_EMIT jobStepSettled(summary);
    if (breakAlert) Q_EMIT runStateChanged(true, true);
  });
  job->setOnEnded([this, raw](int rank, const std::string& why) {
    if (raw->worldSize() > 1) Q_EMIT rankEnded(rank, QString::fromStdString(why));
  });
  return job;
}

void EngineAdapter::attachLoop() {
  std::shared_ptr<AttachJob> job;
  std::shared_ptr<CaptureStore> store;
  int worldSize = 1;
  std::string name;
  while (!m_attachStop.load()) {
    // Ranks of the job join until all have, or until every one that came has left.
    if (job && (int(job->ranks().size()) >= worldSize || job->waitEnded(0))) break;
    const int fd = m_listener->accept(job ? 200 : -1);
    if (fd < 0) continue;
    std::string error;
    const auto& address = m_listener->parsed();
    auto accepted = AttachSession::accept(fd, address.tcp ? address.token : "", !address.tcp,
                                          job ? store : std::make_shared<CaptureStore>(m_capBytes), &error);
    if (!accepted) {
      Q_EMIT attachRefused(QString::fromStdString(error));
      continue;
    }
    const ScriptRecord script = accepted->script();
    if (!job) {
      store = accepted->store();
      job = startJob(store);
      worldSize = std::max(1, script.worldSize);
      name = script.name;
      job->setAllHooks(accepted->hooks());  // what the script hooked itself, for every rank
      job->setBreakRules(m_breakRules.load());
      const auto modules = accepted->modules();
      const auto hooks = accepted->hooks();
      QMetaObject::invokeMethod(
          this, [this, job, store, script, modules, hooks] { adoptJob(job, store, script, modules, hooks); },
          Qt::BlockingQueuedConnection);
    }
    if (!job->add(std::move(accepted), &error)) {
      Q_EMIT attachRefused(QString::fromStdString(error));
      continue;
    }
    if (worldSize > 1) Q_EMIT rankAttached(script.rank, describeScript(script));
  }
  if (!job) return;
  // One script (or job) per Attach: the listener closes, so a late one is told no one listens.
  QMetaObject::invokeMethod(this, [this] { m_listener.reset(); }, Qt::QueuedConnection);
  job->waitEnded(-1);
  m_running = false;
  m_paused = false;
  Q_EMIT runStateChanged(false, false);
  QString reason;
  const auto scripts = job->scripts();
  if (worldSize > 1) {
    reason = QStringLiteral("every attached rank of job %1 left (%2 of %3 ranks attached)")
                 .arg(QString::fromStdString(scripts.front().job))
                 .arg(scripts.size())
                 .arg(worldSize);
    // Ranks that ended alike are named together: "ranks 0-7: closed by the script after 400 steps".
    std::map<std::string, std::vector<int>> byEnd;
    for (const auto& s : scripts) byEnd[s.ended].push_back(s.rank);
    for (const auto& [ended, ranks] : byEnd) {
      reason += QStringLiteral("; %1 %2: %3")
                    .arg(ranks.size() > 1 ? QStringLiteral("ranks") : QStringLiteral("rank"),
                         QString::fromStdString(rankList(ranks)), QString::fromStdString(ended));
    }
  } else {
    reason = QString::fromStdString(name + ": " + scripts.front().ended);
  }
  Q_EMIT scriptDetached(reason);
}

void EngineAdapter::adoptJob(std::shared_ptr<AttachJob> job, std::shared_ptr<CaptureStore> store, const ScriptRecord& script,
                             const std::vector<ModuleInfo>& modules, const std::vector<std::uint8_t>& hooks) {
  endEngine();
  std::shared_ptr<AttachJob> ended;  // the previous job, ended: its threads join outside the lock
  {
    std::lock_guard<std::mutex> lock(m_modelMutex);
    ended = std::move(m_job);
    m_job = job;
  }
  m_engineJob = false;
  m_store = std::move(store);
  m_store->setCapBytes(m_capBytes);
  m_configured = false;
  m_stepsDone = 0;
  m_interventions.clear();
  job->setRuleSettings(m_ruleSettings);
  ModelSummary summary;
  summary.path = QStringLiteral("attached:") + QString::fromStdString(script.name);
  summary.fileName = QString::fromStdString(script.name);
  summary.modules = modules;
  summary.hooks = hooks;
  summary.attached = true;
  summary.script = describeScript(script);
  summary.worldSize = std::max(1, script.worldSize);
  summary.job = QString::fromStdString(script.job);
  m_running = true;
  m_paused = false;
  summary.store = m_store;
  Q_EMIT modelLoaded(summary);
  Q_EMIT runStateChanged(true, false);
}

void EngineAdapter::exportAttached(const QString& dir, bool overwrite, const QString& interrupted) {
  const auto j = job();
  ExportManifest manifest = j->manifest();
  manifest.interrupted = interrupted.toStdString();
  auto exported = [](ScriptRecord& s) {
    if (s.ended == "still attached") s.ended = "exported while attached";
  };
  if (manifest.script) exported(*manifest.script);
  for (auto& s : manifest.ranks) exported(s);
  ExportOptions options;
  options.overwrite = overwrite;
  options.extraFiles = {{"alerts.csv", alertsCsv(j->alerts())}};
  std::string error;
  writeExport(dir.toStdString(), manifest, *m_store, {}, options, &error);
  Q_EMIT exportFinished(dir, QString::fromStdString(error));
}
