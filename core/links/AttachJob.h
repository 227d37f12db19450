#pragma once
// The ranks of one torch.distributed job, each a ScriptLink, served as one: one store (rank
// is part of every series' key), controls that act on every rank at the same step, and the
// rank_divergence rule across them. No LibTorch here.

#include "links/ScriptLink.h"
#include "links/JobGate.h"
#include "links/JobRank.h"
#include "links/JobRecord.h"

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace hookscope {

/// Several attached processes of one job. Every rank runs the same model; each is served on a
/// thread of its own from add() until it leaves.
///
/// Why controls need the job: a rank paused alone would leave the others waiting inside their
/// next all-reduce, forever. So
/// - with a breakpoint armed, no rank goes past a step's end until every live rank has ended
///   that step and the job has looked at all of them (then all pause at that step, or none);
/// - a pause asks every rank to stop after its current step; ranks that stopped a step behind
///   the furthest are stepped up to it, so all wait at the same step.
class AttachJob {
public:
  explicit AttachJob(std::shared_ptr<CaptureStore> store);
  ~AttachJob();  ///< closes every link and waits for their threads
  AttachJob(const AttachJob&) = delete;
  AttachJob& operator=(const AttachJob&) = delete;

  /// Called on a rank's serving thread after each of its steps (after the job saw it).
  void setOnStep(std::function<void(int rank, const AttachedStep&)> onStep);
  /// Called on a rank's serving thread when it leaves, with why.
  void setOnEnded(std::function<void(int rank, const std::string& why)> onEnded);
  /// Called when every live rank has ended `step` and the job has checked it: the job's own
  /// alerts of that step (rank_divergence) and the break that pauses or stops every rank there.
  /// Runs with the job's lock held: it must not call the job.
  void setOnSettled(JobGate::OnSettled onSettled);

  /// Called on a rank's serving thread when an engine process answers a configuration, a step
  /// fails in it or it has paused (ScriptLink::setOnEngineEvent).
  void setOnEngineEvent(std::function<void(int rank, const std::string& event, const std::string& message)> onEvent);
  /// Sends every rank that is an engine process this run configuration (runConfigText's form).
  void configure(const std::string& configText);
  /// The first rank's engine hello, when the job is an engine process running a model file.
  std::optional<EngineHello> engine() const;
  /// Takes an accepted link as its rank and starts serving it with the job's hooks, rules
  /// and run state. False with a message (also sent to the script) when it is not of this job:
  /// another job, another world size, another model, or a rank already attached.
  bool add(std::unique_ptr<ScriptLink> link, std::string* error);

  /// The ranks that attached, ascending; and those still attached.
  std::vector<int> ranks() const;
  std::vector<int> liveRanks() const;
  /// The first rank's module tree (every rank's is the same), empty before one attached.
  std::vector<ModuleInfo> modules() const;
  /// The world size the ranks reported (0 before one attached).
  int worldSize() const;
  /// Waits up to `timeoutMs` (-1: forever) until every rank that attached has left (and the
  /// onEnded callback of each has returned).
  bool waitEnded(int timeoutMs) const;

  // Any thread; applied to every rank, and to ranks that attach later.
  void setAllHooks(const std::vector<std::uint8_t>& masks);
  /// One module's mask, on every rank from its next step.
  void setHooks(int module, std::uint8_t mask);
  std::vector<std::uint8_t> hooks() const;
  void setBins(int bins);
  void setRuleSettings(const RuleSettings& settings);
  void setBreakRules(std::uint32_t mask, bool stopOnBreak = false);
  void setGradientIntervention(int module, GradientIntervention intervention);
  void setOutputIntervention(int module, OutputIntervention intervention);
  void pause();
  void resume();
  /// Every rank runs `count` more steps, then pauses.
  void step(int count = 1);
  bool paused() const;
  /// The newest step every live rank has ended and the job has checked (-1: none yet).
  std::int64_t settledStep() const;
  /// The ranks that say they wait, paused, and the step they wait after.
  std::map<int, std::int64_t> pausedSteps() const;
  void stop(const std::string& reason);
  /// Ends every link; the scripts detach and train on. Ranks that come later are refused.
  void close();

  /// Alerts of every rank, and the job's own (rank_divergence).
  std::vector<Alert> alerts() const;
  /// Gaps of every rank (a gap's captures are that rank's).
  std::vector<GapRecord> gaps() const;
  std::vector<InterventionRecord> interventions() const;
  /// Each rank's script, with how its link ended and its steps.
  std::vector<ScriptRecord> scripts() const;
  /// The export's manifest of what the job recorded: its scripts (every rank when it is a job of
  /// several), steps, hooked modules, interventions, gaps, bins and the store's thinning. The
  /// caller adds how it ended (`interrupted`).
  ExportManifest manifest() const;
  /// The manifest of a model file run by an engine process (a job of one): manifest()'s record
  /// told as the model file's, with the configurations of `configHistory` it stepped with (a
  /// record still open, toStep -1, ends at the last step; one from after the last step is left out).
  ExportManifest modelFileManifest(const std::string& modelFile, const std::string& sha256,
                                   const std::vector<ConfigRecord>& configHistory) const;
  /// The first break alert that paused or stopped the job, if any.
  std::optional<Alert> breakAlert() const;
  /// Whether a rank broke the protocol.
  bool brokeProtocol() const;

private:
  void onRankStep(int rank, const AttachedStep& step);
  void onRankPaused(int rank, std::int64_t step);
  void onRankEnded(int rank, const std::string& why);
  /// The record of every rank now (lock held).
  JobRecord recordLocked() const { return JobRecord(m_ranks, m_gate.alerts()); }
  /// Settles what can be, then lines paused ranks up (lock held).
  void settleLocked();

  std::shared_ptr<CaptureStore> m_store;
  mutable std::mutex m_mutex;
  mutable std::condition_variable m_endedCv;
  JobRanks m_ranks;
  std::string m_job;
  int m_worldSize = 0;
  std::vector<ModuleInfo> m_modules;
  /// Each module's output shapes by call, as the first step that reported them gave them.
  std::map<std::string, std::vector<std::string>> m_shapes;
  std::vector<std::string> m_parameters;
  std::function<void(int, const std::string&, const std::string&)> m_onEngineEvent;

  JobControls m_controls;
  bool m_closed = false;
  JobGate m_gate;
  std::function<void(int, const AttachedStep&)> m_onStep;
  JobGate::OnSettled m_onSettled;
  std::function<void(int, const std::string&)> m_onEnded;
};

} // namespace hookscope
