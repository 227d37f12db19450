#include "session/JobSession.h"

#include "files/ExportFolder.h"
#include "links/AttachJob.h"

#include <algorithm>
#include <cmath>

using namespace hookscope;

JobSession::JobSession(SessionSummary summary, std::shared_ptr<AttachJob> job, bool engine)
    : Session(std::move(summary)), m_job(std::move(job)), m_engine(engine) {
  AttachJob* raw = m_job.get();  // the job outlives its rank threads, which call these
  m_job->setOnStep([this](int rank, const AttachedStep& step) {
    const StepSummary summary = summaryOf(rank, step);
    changeState([&](RunState& s) { s.stepsDone = std::max<qint64>(s.stepsDone, step.step + 1); });
    Q_EMIT stepFinished(summary);
    afterStep(step);
  });
  // Runs under the job's lock: it only reports. Also when the last ranks leave: the steps they
  // settle then get no stepFinished.
  m_job->setOnSettled([this](std::int64_t step, const std::vector<Alert>& alerts, const std::optional<Alert>& breakAlert) {
    StepSummary summary;
    summary.result.step = step;
    summary.finishedStep = step;
    summary.alerts = alerts;
    summary.breakAlert = breakAlert;
    if (breakAlert) {
      summary.rank = breakAlert->rank;
      // Paused before the window hears of the break: a Step it sends on hearing it must find
      // the run paused (under load this thread could otherwise be preempted between the two).
      breakPaused();
    }
    Q_EMIT jobStepSettled(summary);
  });
  m_job->setOnEnded([this, raw](int rank, const std::string& why) {
    if (raw->worldSize() > 1) Q_EMIT rankEnded(rank, QString::fromStdString(why));
  });
}

JobSession::~JobSession() { endJob(); }

void JobSession::endJob() {
  if (!m_job) return;
  m_job->close();  // scripts detach and train on; an engine process ends
  // Its rank threads end here, not after this session: their callbacks reach it. (The listener
  // may hold the job a while longer; it takes no more ranks once closed.)
  m_job->waitEnded(-1);
  m_job->setOnStep({});
  m_job->setOnSettled({});
  m_job->setOnEnded({});
  m_job->setOnEngineEvent({});
  m_job.reset();
}

StepSummary JobSession::summaryOf(int rank, const AttachedStep& step) const {
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
  if (m_engine) {  // the engine times its own parts
    summary.result.totalMs = scalar("step_ms");
    summary.result.forwardMs = scalar("forward_ms");
    summary.result.backwardMs = scalar("backward_ms");
    summary.result.optimizerMs = scalar("optimizer_ms");
    summary.result.captureMs = scalar("capture_ms");
  }
  summary.finishedStep = m_job->settledStep();
  summary.shapes = step.shapes;
  summary.alerts = step.alerts;  // the break, if any, is the job's: jobStepSettled
  return summary;
}

void JobSession::breakPaused() {
  changeState([](RunState& s) { s.phase = RunState::Phase::Paused; });
}

void JobSession::setHooks(const std::vector<std::uint8_t>& masks) { m_job->setAllHooks(masks); }

void JobSession::setGradientIntervention(int module, GradientIntervention intervention) {
  m_job->setGradientIntervention(module, intervention);
}

void JobSession::setOutputIntervention(int module, OutputIntervention intervention) {
  m_job->setOutputIntervention(module, intervention);
}

void JobSession::setBreakRules(quint32 mask) { m_job->setBreakRules(mask); }

void JobSession::setRuleSettings(const RuleSettings& settings) { m_job->setRuleSettings(settings); }

std::vector<std::uint8_t> JobSession::hooks() const { return m_job->hooks(); }

QString JobSession::writeExport(ExportManifest manifest, const QString& dir, bool overwrite,
                                const QString& interrupted) const {
  manifest.interrupted = interrupted.toStdString();
  ExportOptions options;
  options.overwrite = overwrite;
  options.extraFiles = {{"alerts.csv", alertsCsv(m_job->alerts())}};
  std::string error;
  hookscope::writeExport(dir.toStdString(), manifest, *m_summary.store, {}, options, &error);
  return QString::fromStdString(error);
}
