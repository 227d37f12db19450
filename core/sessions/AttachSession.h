#pragma once
// One training script attached over the wire (docs/protocol.md): its module tree, its
// captures turned into statistics by the same code as a model file's, its steps checked by
// the rules, and the controls sent back to it. The header needs no LibTorch.

#include "store/CaptureStore.h"
#include "files/ExportManifest.h"
#include "common/ModelTypes.h"
#include "rules/RuleEvaluator.h"
#include "wire/WireFrame.h"

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace hookscope {

/// One step the script finished, as received.
struct AttachedStep {
  std::int64_t step = 0;
  std::map<std::string, double> scalars;  ///< "loss", "lr" and the script's own
  std::vector<ModuleCallShape> shapes;    ///< output shapes, with the first step
  std::vector<Alert> alerts;              ///< rules that fired on it
  std::optional<Alert> breakAlert;        ///< the armed rule that paused (or stopped) the script here
  int captures = 0;                       ///< captures received for it
  std::int64_t droppedCaptures = 0;       ///< captures the script could not keep (see GapRecord)
  std::int64_t droppedBytes = 0;
  double seconds = 0;                     ///< since the previous step ended
  /// In a job of several ranks: (sum, L2 norm) of each parameter after the optimizer step and
  /// of its gradient, in the order of the hello's `parameters` (empty when not sent; a NaN pair
  /// for a parameter without a gradient). What rank_divergence compares.
  std::vector<std::array<double, 2>> parameterPrints;
  std::vector<std::array<double, 2>> gradientPrints;
};

/// What a HookScope engine process (`hookscope-cli serve`) says of itself in its hello: it runs
/// a model file, computes its statistics itself, and takes `configure`.
struct EngineHello {
  std::string model;         ///< the model file's path
  std::string exampleInput;  ///< the input spec stored in the model file, or ""
  std::string sha256;        ///< of the model file
  std::string confinement;   ///< what confines the engine process ("" if nothing)
};

/// Serves one attached script: accept() reads its hello, serve() receives until it leaves.
/// Commands may come from any thread and reach the script at its next step boundary.
class AttachSession {
public:
  /// Reads the hello on `fd` (taken over) within `timeoutMs`. `token` is required when not
  /// empty; `sameUser` also requires the peer to run as this user. Null with a message, which
  /// the peer is sent too, when it is not a HookScope script of this protocol or may not attach.
  static std::unique_ptr<AttachSession> accept(int fd, const std::string& token, bool sameUser,
                                               std::shared_ptr<CaptureStore> store, std::string* error,
                                               int timeoutMs = 10000);
  ~AttachSession();
  AttachSession(const AttachSession&) = delete;
  AttachSession& operator=(const AttachSession&) = delete;

  const ScriptRecord& script() const { return m_script; }
  /// Its rank in a torch.distributed job (from the hello; 0 alone): captures, scalars and alerts carry it.
  int rank() const { return m_script.rank; }
  /// Set when the peer is a HookScope engine running a model file, not a training script.
  const std::optional<EngineHello>& engine() const { return m_engine; }
  /// An engine's answers to configure(), its failed steps and its pauses: ("configured", ""),
  /// ("failed", why), ("paused", the last step it ran), each after the steps it ran before it.
  void setOnEngineEvent(std::function<void(const std::string& event, const std::string& message)> onEvent);
  /// Any thread: sends an engine the run configuration for its next steps (runConfigText's form).
  void configure(const std::string& configText);
  /// Parameter names of the hello, in the order of AttachedStep's prints.
  const std::vector<std::string>& parameters() const { return m_parameters; }
  const std::vector<ModuleInfo>& modules() const { return m_modules; }
  const std::shared_ptr<CaptureStore>& store() const { return m_store; }
  void setBins(int bins) { m_bins = bins; }
  /// Rules, evaluated on every step the script ends.
  void setRuleSettings(const RuleSettings& settings);

  /// Welcomes the script and receives until it says goodbye, disconnects, breaks the protocol
  /// or close() is called. Returns why it ended; onStep runs on this thread after each step.
  std::string serve(const std::function<void(const AttachedStep&)>& onStep);
  /// Whether serve() ended with the script's goodbye.
  bool endedCleanly() const { return m_clean.load(); }
  /// Whether serve() ended because the script broke the protocol.
  bool brokeProtocol() const { return m_broken.load(); }

  // Any thread:
  /// A module's hook mask (bits of kindBit); sent at once when serving.
  void setHooks(int module, std::uint8_t mask);
  /// Every module's mask at once.
  void setAllHooks(const std::vector<std::uint8_t>& masks);
  std::vector<std::uint8_t> hooks() const;
  void setGradientIntervention(int module, GradientIntervention intervention);
  void setOutputIntervention(int module, OutputIntervention intervention);
  /// Interventions in force over the session, for the manifest.
  std::vector<InterventionRecord> interventions() const;
  void pause();
  void resume();
  /// Lets the script run `count` more steps, then pause.
  void step(int count = 1);
  bool paused() const { return m_paused.load(); }
  /// Ends the script's run: its step() raises hookscope.Stopped with `reason`.
  void stop(const std::string& reason);
  /// The rules that pause (or with stopOnBreak, stop) the script; while any is armed, the
  /// script waits at each step's end until its step is checked, so it stops at that step.
  void setBreakRules(std::uint32_t mask, bool stopOnBreak = false);
  /// Makes serve() return; the connection closes.
  void close();
  /// Instead of serve(): tells the script why it may not attach, and hangs up.
  void refuse(const std::string& message);

  // A job of several ranks (AttachJob) decides for all of them at each step end:
  /// When set, a step's end is not answered: `gate` gets it (on serve's thread), and the step
  /// is answered by release(). `paused` hears the script say it waits, paused after a step.
  void setGate(std::function<void(const AttachedStep&)> gate, std::function<void(std::int64_t step)> paused);
  /// How a step's end is answered.
  enum class StepAnswer { Go, Pause, Stop };
  /// Answers the end of `step`: a pause or a stop (hookscope.Stopped with `reason`) first, then
  /// the acknowledgement the script waits for when breakpoints are armed.
  void release(std::int64_t step, StepAnswer answer, const std::string& reason = "");
  /// Copies of the alerts so far.
  std::vector<Alert> alerts() const;
  /// Steps dropped in part by the script, for the manifest.
  std::vector<GapRecord> gaps() const;
  std::int64_t stepsDone() const { return m_stepsDone.load(); }

private:
  AttachSession() = default;
  /// serve()'s loop: frames until the script leaves, breaks the protocol, or close().
  std::string receiveFrames();
  /// How a session the script closed ended.
  std::string closedText() const;
  bool handleFrame(const wire::Frame& frame, std::string* error);
  bool handleStep(const nlohmann::json& message, std::string* error);
  bool handleStats(const nlohmann::json& message, std::string* error);
  /// The series a capture or stats entry names: its module (by index into the hello's) or its
  /// parameter, call and index, and this session's rank.
  bool seriesKey(const nlohmann::json& message, CaptureKind kind, std::int64_t call, std::int64_t index, const char* what,
                 SeriesKey* key, std::string* error) const;
  bool send(const std::string& jsonText);
  /// Sends a command now, or right after the welcome when serve() has not sent it yet.
  void sendOrQueue(const std::string& jsonText);
  std::string hooksMessage(const char* type) const;

  int m_fd = -1;
  int m_wake[2] = {-1, -1};
  ScriptRecord m_script;
  std::vector<ModuleInfo> m_modules;
  std::map<std::string, int> m_moduleIndex;
  std::shared_ptr<CaptureStore> m_store;
  int m_bins = 64;

  mutable std::mutex m_stateMutex;  // hooks, interventions, rules, alerts, gaps
  std::vector<std::uint8_t> m_hooks;
  std::map<int, GradientIntervention> m_gradientOps;
  std::map<int, OutputIntervention> m_outputOps;
  std::vector<InterventionRecord> m_interventionLog;
  std::unique_ptr<RuleEvaluator> m_rules;
  std::vector<GapRecord> m_gaps;
  std::uint32_t m_breakRules = 0;
  bool m_stopOnBreak = false;

  std::mutex m_sendMutex;
  std::atomic<bool> m_welcomed{false};
  bool m_served = false;                     ///< serve() has begun (state lock)
  std::vector<std::string> m_beforeWelcome;  ///< commands given before it (state lock)
  std::atomic<bool> m_paused{false};
  std::atomic<bool> m_clean{false};
  bool m_stoppedByUs = false;  ///< the script's goodbye says a stop from HookScope ended it (serve's thread)
  std::atomic<bool> m_broken{false};
  std::atomic<std::int64_t> m_stepsDone{0};

  // The step being received (serve's thread only).
  std::int64_t m_step = 0;
  StepOrder m_order;
  int m_stepCaptures = 0;
  std::vector<wire::Frame> m_early;  // frames that came with the hello
  std::function<void(const AttachedStep&)> m_onStep;
  std::function<void(const AttachedStep&)> m_gate;
  std::function<void(std::int64_t)> m_pausedHeard;
  std::vector<std::string> m_parameters;
  std::optional<EngineHello> m_engine;
  std::function<void(const std::string&, const std::string&)> m_onEngineEvent;
  std::chrono::steady_clock::time_point m_lastStepEnd;
};

} // namespace hookscope
