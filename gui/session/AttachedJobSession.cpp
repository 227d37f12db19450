#include "session/AttachedJobSession.h"

#include "files/ExportFolder.h"
#include "links/AttachJob.h"

using namespace hookscope;

QString AttachedJobSession::describe(const ScriptRecord& script) {
  return QStringLiteral("%1 (pid %2 on %3, PyTorch %4, %5)")
      .arg(QString::fromStdString(script.name))
      .arg(script.pid)
      .arg(QString::fromStdString(script.host), QString::fromStdString(script.torch),
           QString::fromStdString(script.device));
}

namespace {

SessionSummary attachedSummary(const ScriptRecord& script, const std::vector<ModuleInfo>& modules,
                               const std::vector<std::uint8_t>& hooks, std::shared_ptr<CaptureStore> store) {
  SessionSummary summary;
  summary.path = QStringLiteral("attached:") + QString::fromStdString(script.name);
  summary.fileName = QString::fromStdString(script.name);
  summary.modules = modules;
  summary.hooks = hooks;
  summary.attached = true;
  summary.script = AttachedJobSession::describe(script);
  summary.worldSize = std::max(1, script.worldSize);
  summary.job = QString::fromStdString(script.job);
  summary.store = std::move(store);
  return summary;
}

} // namespace

AttachedJobSession::AttachedJobSession(std::shared_ptr<AttachJob> job, std::shared_ptr<CaptureStore> store,
                                       const ScriptRecord& script, const std::vector<ModuleInfo>& modules,
                                       const std::vector<std::uint8_t>& hooks)
    : JobSession(attachedSummary(script, modules, hooks, std::move(store)), std::move(job), /*engine=*/false) {
  // An attached script is running from the start.
  changeState([](RunState& s) { s.phase = RunState::Phase::Running; });
}

AttachedJobSession::~AttachedJobSession() { endJob(); }

SessionAbilities AttachedJobSession::abilities(const RunState& state) const {
  SessionAbilities can = Session::abilities(state);
  can.run = can.step = state.running() && state.paused();
  can.pause = state.running() && !state.paused();
  return can;
}

void AttachedJobSession::scriptsLeft() {
  changeState([](RunState& s) { s.phase = RunState::Phase::Idle; });
}

void AttachedJobSession::afterStep(const AttachedStep&) {
  const bool paused = m_job->paused();
  changeState([paused](RunState& s) {
    if (s.running()) s.phase = paused ? RunState::Phase::Paused : RunState::Phase::Running;
  });
}

void AttachedJobSession::run(const RunConfig&, qint64) {
  if (state().running()) setPaused(false);  // the script's own loop runs; the window resumes it
}

void AttachedJobSession::stepOnce(const RunConfig&) {
  const RunState now = state();
  if (!now.running() || !now.paused()) return;
  m_job->step(1);  // every rank runs one step and pauses again
  changeState([](RunState& s) { s.phase = RunState::Phase::Running; });
}

void AttachedJobSession::resume(const RunConfig&) {
  if (state().paused()) setPaused(false);
}

void AttachedJobSession::setPaused(bool paused) {
  if (!state().running()) return;
  if (paused) {
    m_job->pause();
  } else {
    m_job->resume();
  }
  changeState([paused](RunState& s) { s.phase = paused ? RunState::Phase::Paused : RunState::Phase::Running; });
}

void AttachedJobSession::requestStop() {
  if (state().running()) m_job->close();  // an attached script detaches: its hooks go, it trains on
}

QString AttachedJobSession::exportTo(const QString& dir, bool overwrite, const QString& interrupted) {
  ExportManifest manifest = m_job->manifest();
  auto exported = [](ScriptRecord& s) {
    if (s.ended == "still attached") s.ended = "exported while attached";
  };
  if (manifest.script) exported(*manifest.script);
  for (auto& s : manifest.ranks) exported(s);
  return writeExport(std::move(manifest), dir, overwrite, interrupted);
}
