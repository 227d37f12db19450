#pragma once
// One open thing: a model file run by an engine process, an attached training script or job,
// or a reopened export or checkpoint (read-only). Lives on the session thread: SessionHost makes
// one when something is opened, calls down to it, and destroys it when another replaces it; the
// session reports through its signals (from the session thread or a rank's thread, never waiting
// for the window).

#include "state/RunState.h"
#include "state/SessionTypes.h"
#include "state/SessionView.h"

#include <QObject>
#include <QString>

#include <cstdint>
#include <mutex>
#include <vector>

class Session : public QObject {
  Q_OBJECT

public:
  explicit Session(SessionSummary summary);
  ~Session() override;

  const SessionSummary& summary() const { return m_summary; }
  /// Any thread: where the session is now.
  RunState state() const;
  /// Any thread: which kind of open thing this is.
  virtual SessionKind kind() const = 0;
  /// Any thread: what it can be asked to do in `state` (here: stop a run that is on, export,
  /// be replaced by another while nothing runs; a kind that runs steps adds its own).
  virtual SessionAbilities abilities(const RunState& state) const;
  /// The hook masks a session opened in its place from the same file starts with (what was
  /// ticked stays ticked across Reset weights); none by default.
  virtual std::vector<std::uint8_t> hooks() const { return {}; }
  /// Every script of an attached job has left (said on the host's queue); the captures stay.
  virtual void scriptsLeft() {}

  // The session thread. What a kind of session cannot do, it ignores (a review runs nothing).
  /// Every module's hook mask at once (bits of hookscope::kindBit), from each module's next call.
  virtual void setHooks(const std::vector<std::uint8_t>& masks);
  virtual void setGradientIntervention(int module, hookscope::GradientIntervention intervention);
  virtual void setOutputIntervention(int module, hookscope::OutputIntervention intervention);
  /// Runs `steps` steps with this configuration (<= 0: until stopped).
  virtual void run(const hookscope::RunConfig& config, qint64 steps);
  /// Runs exactly one step (also while paused).
  virtual void stepOnce(const hookscope::RunConfig& config);
  /// Resumes a paused run with `config` from its next step.
  virtual void resume(const hookscope::RunConfig& config);
  /// Pauses before the next step; unpausing resumes.
  virtual void setPaused(bool paused);
  /// Ends the run after the step in progress (a second Stop during it: at once).
  virtual void requestStop();
  /// The rules that pause a run when they fire (bit i: RuleKind i).
  virtual void setBreakRules(quint32 mask);
  virtual void setRuleSettings(const hookscope::RuleSettings& settings);
  virtual void setMemoryCap(std::size_t bytes);
  /// How long a step may take before the engine process is stopped (<= 0: no limit).
  virtual void setStepTimeLimit(int seconds);
  /// Writes the captures into `dir`; `interrupted` names the signal that ended the session
  /// early. "" when it was written, else why not.
  virtual QString exportTo(const QString& dir, bool overwrite, const QString& interrupted) = 0;

Q_SIGNALS:
  void stateChanged(const RunState& state);
  void stepFinished(const StepSummary& summary);
  /// Every live rank of a job has ended this step and the job has checked it: the job's own
  /// alerts (rank_divergence), and the break that paused every rank here, if any.
  void jobStepSettled(const StepSummary& summary);
  /// Something the user should read in the status bar ("Stopping after the step in progress…").
  void notice(const QString& message);
  /// A step or run failed; the session stays usable.
  void failed(const QString& message);
  /// The engine process running the model ended by itself: why. The captures stay.
  void engineStopped(const QString& message);
  /// A rank of an attached job joined (`who`: its script, pid and host) or left (`why`).
  void rankAttached(int rank, const QString& who);
  void rankEnded(int rank, const QString& why);

protected:
  /// Changes the state under its lock and says so when it changed.
  template <typename Change>
  void changeState(Change&& change) {
    RunState next;
    {
      std::lock_guard<std::mutex> lock(m_stateMutex);
      change(m_state);
      if (m_state == m_said) return;
      m_said = next = m_state;
    }
    Q_EMIT stateChanged(next);
  }

  SessionSummary m_summary;

private:
  mutable std::mutex m_stateMutex;
  RunState m_state;
  RunState m_said;  ///< the state last emitted
};
