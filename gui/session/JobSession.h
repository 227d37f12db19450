#pragma once
// A session whose captures come from an AttachJob: an attached script or job, or the engine
// process running a model file (which speaks the same wire). Hooks, interventions, rules and
// breaks go to every rank; each rank's step and each settled step come back as signals.

#include "session/Session.h"

#include <memory>

namespace hookscope {
class AttachJob;
struct AttachedStep;
struct ExportManifest;
} // namespace hookscope

class JobSession : public Session {
  Q_OBJECT

public:
  /// `engine`: the job is a model file's engine process, which times its own steps' parts.
  JobSession(SessionSummary summary, std::shared_ptr<hookscope::AttachJob> job, bool engine);
  ~JobSession() override;

  void setHooks(const std::vector<std::uint8_t>& masks) override;
  void setGradientIntervention(int module, hookscope::GradientIntervention intervention) override;
  void setOutputIntervention(int module, hookscope::OutputIntervention intervention) override;
  void setBreakRules(quint32 mask) override;
  void setRuleSettings(const hookscope::RuleSettings& settings) override;
  /// Every module's hook mask as the job has them.
  std::vector<std::uint8_t> hooks() const override;

protected:
  /// Closes the job and waits for its threads, whose callbacks reach this session: each derived
  /// session's destructor calls it first, while its own members still live.
  void endJob();
  /// Writes the store into `dir` with `manifest` (its `interrupted` set) and the job's alerts:
  /// "" when written, else why not.
  QString writeExport(hookscope::ExportManifest manifest, const QString& dir, bool overwrite,
                      const QString& interrupted) const;
  /// On a rank's thread, after its stepFinished.
  virtual void afterStep(const hookscope::AttachedStep& step) = 0;
  /// Under the job's lock, when a break pauses every rank at a step: before the window hears of it.
  virtual void breakPaused();

  std::shared_ptr<hookscope::AttachJob> m_job;

private:
  StepSummary summaryOf(int rank, const hookscope::AttachedStep& step) const;

  const bool m_engine;
};
