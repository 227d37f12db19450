#pragma once
// One process attached over the wire (docs/protocol.md): a training script, or the engine
// process running a model file. Its hello read and checked (ScriptHello), its reports into the
// store (StepIntake), each step checked by the rules and the armed breaks (StepGate), and what
// HookScope asks of it sent back (ScriptControls), over one connection (PeerSocket). The header
// needs no LibTorch.

#include "files/ExportManifest.h"
#include "rules/RuleEvaluator.h"
#include "links/AttachedStep.h"
#include "links/PeerSocket.h"
#include "links/ScriptControls.h"
#include "links/ScriptHello.h"
#include "links/StepGate.h"
#include "links/StepIntake.h"
#include "store/CaptureStore.h"

#include <nlohmann/json_fwd.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace hookscope {

/// Serves one attached script: accept() reads its hello, serve() receives until it leaves.
/// Commands may come from any thread and reach the script at its next step boundary.
class ScriptLink {
public:
  /// Reads the hello on `fd` (taken over) within `timeoutMs`. With a `token` (TCP), the peer
  /// first proves it knows it and is sent the listener's proof (WireAuth.h); `sameUser` requires
  /// the peer to run as this user. Null with a message, which the peer is sent too, when it is
  /// not a HookScope script of this protocol or may not attach.
  static std::unique_ptr<ScriptLink> accept(int fd, const std::string& token, bool sameUser,
                                               std::shared_ptr<CaptureStore> store, std::string* error,
                                               int timeoutMs = 10000);
  ~ScriptLink();
  ScriptLink(const ScriptLink&) = delete;
  ScriptLink& operator=(const ScriptLink&) = delete;

  const ScriptRecord& script() const { return m_hello.script; }
  /// Its rank in a torch.distributed job (from the hello; 0 alone): captures, scalars and alerts carry it.
  int rank() const { return m_hello.script.rank; }
  /// Set when the peer is a HookScope engine running a model file, not a training script.
  const std::optional<EngineHello>& engine() const { return m_hello.engine; }
  /// An engine's answers to configure(), its failed steps and its pauses: ("configured", ""),
  /// ("failed", why), ("paused", the last step it ran), each after the steps it ran before it.
  void setOnEngineEvent(std::function<void(const std::string& event, const std::string& message)> onEvent);
  /// Any thread: sends an engine the run configuration for its next steps (runConfigText's form).
  void configure(const std::string& configText);
  /// Parameter names of the hello, in the order of AttachedStep's prints.
  const std::vector<std::string>& parameters() const { return m_hello.parameters; }
  const std::vector<ModuleInfo>& modules() const { return m_hello.modules; }
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
  /// Every module's mask at once, in one message.
  void setAllHooks(const std::vector<std::uint8_t>& masks);
  std::vector<std::uint8_t> hooks() const;
  void setGradientIntervention(int module, GradientIntervention intervention);
  void setOutputIntervention(int module, OutputIntervention intervention);
  /// Interventions in force over the link, for the manifest.
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
  using StepAnswer = hookscope::StepAnswer;
  /// Answers the end of `step`: a pause or a stop (hookscope.Stopped with `reason`) first, then
  /// the acknowledgement the script waits for when breakpoints are armed.
  void release(std::int64_t step, StepAnswer answer, const std::string& reason = "");
  /// Copies of the alerts so far.
  std::vector<Alert> alerts() const;
  /// Steps dropped in part by the script, for the manifest.
  std::vector<GapRecord> gaps() const;
  std::int64_t stepsDone() const { return m_stepsDone.load(); }

private:
  ScriptLink(std::unique_ptr<PeerSocket> socket, ScriptHello hello, std::shared_ptr<CaptureStore> store);
  /// serve()'s loop: frames until the script leaves, breaks the protocol, or close().
  std::string receiveFrames();
  /// How a link the script closed ended.
  std::string closedText() const;
  bool handleFrame(const wire::Frame& frame, std::string* error);
  bool handleStep(const nlohmann::json& message, std::string* error);
  /// Sends a command now, or right after the welcome when serve() has not sent it yet.
  void sendOrQueue(const std::string& jsonText);
  /// ScriptControls' message with this link's sync, bins and pause (state lock held).
  std::string controlsMessage(const char* type) const;
  /// Tells the script its controls when they changed and it has been welcomed (state lock held).
  void sendControlsLocked(bool changed);

  std::unique_ptr<PeerSocket> m_socket;
  ScriptHello m_hello;
  std::shared_ptr<CaptureStore> m_store;
  int m_bins = 64;

  mutable std::mutex m_stateMutex;  // controls, gate; the order of sends after the welcome
  ScriptControls m_controls;
  StepGate m_gate;

  std::atomic<bool> m_welcomed{false};
  bool m_served = false;                     ///< serve() has begun (state lock)
  std::vector<std::string> m_beforeWelcome;  ///< commands given before it (state lock)
  std::atomic<bool> m_paused{false};
  std::atomic<bool> m_clean{false};
  bool m_stoppedByUs = false;  ///< the script's goodbye says a stop from HookScope ended it (serve's thread)
  std::atomic<bool> m_broken{false};
  std::atomic<std::int64_t> m_stepsDone{0};

  // serve's thread only.
  StepIntake m_intake;
  std::vector<wire::Frame> m_early;  // frames that came with the hello
  std::function<void(const AttachedStep&)> m_onStep;
  std::function<void(const AttachedStep&)> m_jobGate;
  std::function<void(std::int64_t)> m_pausedHeard;
  std::function<void(const std::string&, const std::string&)> m_onEngineEvent;
};

} // namespace hookscope
