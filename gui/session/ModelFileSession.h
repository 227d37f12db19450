#pragma once
// A model file run by an engine process of its own (`hookscope-cli serve`), which speaks the
// attach wire: the window's runs (a number of steps, or until stopped), Step, Pause and Stop; the
// run configuration sent when it changes; a step that takes longer than the limit, or a second
// Stop, ends the process. When the process ends by itself the session stays, with its captures.

#include "session/JobSession.h"

#include "common/RunConfig.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace hookscope {
class EngineProcess;
}

class QTimer;

class ModelFileSession : public JobSession {
  Q_OBJECT

public:
  /// What a model file's session starts with: its hooks (kept across a reload of the same
  /// file), rules, breaks, the store's cap and the step time limit.
  struct Settings {
    std::vector<std::uint8_t> hooks;
    quint32 breakRules = 0;
    hookscope::RuleSettings rules;
    int stepTimeLimit = 120;
  };

  /// The session of an engine process that has said hello; null with why (`error`) when its
  /// connection cannot join a job.
  static std::unique_ptr<ModelFileSession> open(std::shared_ptr<hookscope::EngineProcess> engine, const QString& path,
                                                const Settings& settings, QString* error);
  ~ModelFileSession() override;

  SessionKind kind() const override { return SessionKind::ModelFile; }
  /// Runs, pauses and steps its own loop; a fresh copy of its file opens while it is stopped.
  SessionAbilities abilities(const RunState& state) const override;
  void run(const hookscope::RunConfig& config, qint64 steps) override;
  void stepOnce(const hookscope::RunConfig& config) override;
  void resume(const hookscope::RunConfig& config) override;
  void setPaused(bool paused) override;
  void requestStop() override;
  void setStepTimeLimit(int seconds) override { m_stepTimeLimit = seconds; }
  QString exportTo(const QString& dir, bool overwrite, const QString& interrupted) override;

protected:
  void afterStep(const hookscope::AttachedStep& step) override;
  void breakPaused() override;

private:
  ModelFileSession(SessionSummary summary, std::shared_ptr<hookscope::AttachJob> job,
                   std::shared_ptr<hookscope::EngineProcess> engine, const QString& path, std::string sha256,
                   int stepTimeLimit);
  /// The job's end: the engine process ended by itself (a crash, the limit, a second Stop).
  void engineEnded(const std::string& why);
  /// The engine's answers: a failed step or configuration, and its pause after a Stop.
  void engineEvent(const std::string& event, const std::string& message);
  /// Sends the engine a configuration that differs from the one it has; false when there is no
  /// engine to send it to.
  bool prepare(const hookscope::RunConfig& config);
  /// Every half second: stops an engine whose step is over the time limit.
  void checkStepTime();
  /// Kills the engine process in the middle of a step; `why` goes into engineStopped's message.
  void killEngine(const std::string& why);
  /// The run ended (its steps done, stopped, or failed).
  void finishRun();
  bool engineOpen() const;
  /// Steady-clock milliseconds, for m_busySince.
  static qint64 nowMs();

  mutable std::mutex m_engineMutex;  ///< guards m_engine and m_killReason against the rank's thread
  std::shared_ptr<hookscope::EngineProcess> m_engine;
  std::string m_killReason;  ///< why the window killed the engine mid-step
  std::atomic<bool> m_ending{false};  ///< set when the window ends it on purpose
  const QString m_path;
  const std::string m_sha256;
  hookscope::RunConfig m_config;
  std::vector<hookscope::ConfigRecord> m_configHistory;  ///< every configuration run, with its steps
  std::atomic<bool> m_configured{false};
  std::atomic<qint64> m_remaining{0};  ///< steps left in the run (-1: until stopped)
  std::atomic<bool> m_stop{false};
  std::atomic<int> m_stepTimeLimit{120};
  /// Milliseconds (steady clock) since which a step is awaited from the engine; 0: none.
  std::atomic<qint64> m_busySince{0};
  QTimer* m_watchdog = nullptr;
};
