#pragma once
// A training script attached over the wire, or every rank of its torch.distributed job: its own
// loop runs the steps; the window can pause it, step it, resume it and detach it (Stop), and
// every rank does so at the same step.

#include "session/JobSession.h"

namespace hookscope {
struct ScriptRecord;
}

class AttachedJobSession : public JobSession {
  Q_OBJECT

public:
  /// The first rank of `job` (whose captures go to `store`) has said hello as `script`, with its
  /// module tree and what it hooked itself.
  AttachedJobSession(std::shared_ptr<hookscope::AttachJob> job, std::shared_ptr<hookscope::CaptureStore> store,
                     const hookscope::ScriptRecord& script,
                     const std::vector<hookscope::ModuleInfo>& modules, const std::vector<std::uint8_t>& hooks);
  ~AttachedJobSession() override;

  /// "train.py (pid 42 on host, PyTorch 2.13.0, cpu)".
  static QString describe(const hookscope::ScriptRecord& script);
  /// The job the session serves (the listener adds its later ranks).
  const std::shared_ptr<hookscope::AttachJob>& job() const { return m_job; }
  /// A lone script, or every rank of a job.
  SessionKind kind() const override { return m_summary.worldSize > 1 ? SessionKind::Job : SessionKind::Script; }
  /// While attached: resumed, paused, stepped while paused and detached, never started again
  /// (its own loop runs the steps) nor reset.
  SessionAbilities abilities(const RunState& state) const override;
  /// Every rank has left; the captures stay.
  void scriptsLeft() override;

  void run(const hookscope::RunConfig& config, qint64 steps) override;
  void stepOnce(const hookscope::RunConfig& config) override;
  void resume(const hookscope::RunConfig& config) override;
  void setPaused(bool paused) override;
  /// Detaches: the scripts' hooks go and they train on.
  void requestStop() override;
  QString exportTo(const QString& dir, bool overwrite, const QString& interrupted) override;

protected:
  void afterStep(const hookscope::AttachedStep& step) override;
};
