#include "links/ScriptLink.h"
#include "common/FileLimits.h"

#include "wire/WireAuth.h"
#include "wire/WireJson.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

namespace hookscope {

using nlohmann::json;

namespace {

// The listener's side of the token handshake (WireAuth.h): a challenge, the peer's answer read
// with a limit of a few KiB (a 16 MiB message fails at its header, unread), checked, and the
// listener's own proof. False with what went wrong (`closed` when the peer hung up).
bool proveToken(PeerSocket& socket, const std::string& token, int timeoutMs, std::uint8_t* peerVersion, bool* closed,
                std::string* error) {
  const std::string nonce = wire::randomHex(16);
  if (!socket.send(json{{"type", "challenge"}, {"nonce", nonce}}.dump())) {
    *closed = true;
    *error = "the peer closed the connection before its hello";
    return false;
  }
  wire::Frame frame;
  std::vector<wire::Frame> early;
  if (!socket.readFirst(timeoutMs, &frame, &early, peerVersion, closed, error, wire::kMaxUnprovenBytes)) {
    if (error->find("over the limit") != std::string::npos) {
      *error = "the peer sent " + error->substr(0, error->find(" is over")) +
               " before proving the token (an answer to the token challenge is a few hundred bytes): a script of "
               "an older hookscope package, which sends its hello at once? Upgrade it to this HookScope's release";
    }
    return false;
  }
  const json answer = json::parse(frame.payload, nullptr, false);
  const auto text = [&](const char* key) {
    const auto it = answer.is_object() ? answer.find(key) : answer.end();
    return it != answer.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  if (frame.type != wire::kJsonFrame || text("type") != "answer") {
    *error = text("type") == "hello"
                 ? "the script sent its hello without answering the token challenge: its hookscope package is older "
                   "than this HookScope; upgrade it to this HookScope's release"
                 : "the peer did not answer the token challenge: not a HookScope script";
    return false;
  }
  const std::string theirs = text("nonce");
  if (theirs.size() < 16 || theirs.size() > 128 ||
      !wire::constantTimeEqual(text("mac"), wire::scriptProof(token, nonce, theirs))) {
    *error = "wrong or missing token: give the full address the window or recorder printed "
             "(tcp://HOST:PORT?token=...) or set HOOKSCOPE_TOKEN";
    return false;
  }
  if (!early.empty()) {
    *error = "the script sent more before HookScope proved the token";
    return false;
  }
  if (!socket.send(json{{"type", "proof"}, {"mac", wire::listenerProof(token, nonce, theirs)}}.dump())) {
    *closed = true;
    *error = "the peer closed the connection before its hello";
    return false;
  }
  return true;
}

} // namespace

std::unique_ptr<ScriptLink> ScriptLink::accept(int fd, const std::string& token, bool sameUser,
                                                     std::shared_ptr<CaptureStore> store, std::string* error,
                                                     int timeoutMs) {
  std::unique_ptr<PeerSocket> socket = PeerSocket::adopt(fd, error);
  if (!socket) return nullptr;
  std::uint8_t peerVersion = 0;
  auto refuse = [&](const std::string& message) -> std::unique_ptr<ScriptLink> {
    socket->sendError(message, peerVersion);
    *error = message;
    return nullptr;
  };
  if (sameUser && !socket->sameUser()) return refuse("a process of another user tried to attach; refused");

  // Over TCP the peer proves the token before a byte of its hello is read (WireAuth.h).
  wire::Frame frame;
  std::vector<wire::Frame> early;
  bool closed = false;
  std::string problem;
  if (!token.empty()) {
    if (!proveToken(*socket, token, timeoutMs, &peerVersion, &closed, &problem)) {
      if (closed) {
        *error = problem;
        return nullptr;
      }
      return refuse(problem);
    }
  }
  // The hello comes first, within the timeout.
  if (!socket->readFirst(timeoutMs, &frame, &early, &peerVersion, &closed, &problem)) {
    if (closed) {
      *error = problem;
      return nullptr;
    }
    return refuse(problem);
  }
  json hello;
  try {
    if (const std::string deep = checkJsonDepth(frame.payload); !deep.empty()) throw std::runtime_error(deep);
    hello = json::parse(frame.payload);
  } catch (const std::exception& e) {
    return refuse(std::string("the hello is not JSON: ") + e.what());
  }
  if (frame.type != wire::kJsonFrame || !hello.is_object() || hello.value("type", "") != "hello") {
    return refuse("the first message is not a hello");
  }
  ScriptHello read;
  if (!ScriptHello::read(hello, &read, &problem)) return refuse(problem);
  std::unique_ptr<ScriptLink> link(new ScriptLink(std::move(socket), std::move(read), std::move(store)));
  link->m_early = std::move(early);  // frames that came with the hello: serve() handles them
  return link;
}

ScriptLink::ScriptLink(std::unique_ptr<PeerSocket> socket, ScriptHello hello, std::shared_ptr<CaptureStore> store)
    : m_socket(std::move(socket)), m_hello(std::move(hello)), m_store(std::move(store)), m_intake(m_hello, m_store) {
  m_controls.setModules(m_hello.modules);
  setRuleSettings(RuleSettings{});
}

ScriptLink::~ScriptLink() = default;

std::string ScriptLink::serve(const std::function<void(const AttachedStep&)>& onStep) {
  m_onStep = onStep;
  // However it ends, the script sees the connection close (and detaches, training on), even
  // while this link is kept for its captures.
  struct Hangup {
    ScriptLink* self;
    ~Hangup() {
      self->m_welcomed = false;
      self->m_socket->hangUp();
    }
  } hangup{this};
  {
    // Under the state lock, so that every change after it follows it on the wire.
    std::lock_guard<std::mutex> lock(m_stateMutex);
    m_welcomed = true;
    m_served = true;
    if (!m_socket->send(controlsMessage("welcome"))) return "the script went away during its welcome";
    for (const auto& queued : m_beforeWelcome) m_socket->send(queued);
    m_beforeWelcome.clear();
  }
  try {
    return receiveFrames();
  } catch (const std::exception& e) {  // whatever a script sends, the viewer goes on
    m_broken = true;
    m_socket->sendError(std::string("HookScope could not handle a message: ") + e.what());
    return std::string("the script sent a message HookScope could not handle, so it ended the connection: ") + e.what();
  }
}

std::string ScriptLink::closedText() const {
  return (m_stoppedByUs ? "stopped by HookScope after " : "closed by the script after ") +
         std::to_string(m_stepsDone.load()) + " steps";
}

std::string ScriptLink::receiveFrames() {
  m_intake.begin();
  auto fail = [&](const std::string& problem) {
    m_broken = true;
    m_socket->sendError(problem);
    return "the script sent a bad message, so HookScope ended the connection: " + problem;
  };
  std::string error;
  for (auto& frame : m_early) {
    if (!handleFrame(frame, &error)) return fail(error);
  }
  m_early.clear();
  wire::FrameReader reader;
  std::vector<char> buffer(1 << 18);
  while (true) {
    const auto woke = m_socket->wait();
    if (woke == PeerSocket::Wait::Failed) return std::string("poll failed: ") + std::strerror(errno);
    if (woke == PeerSocket::Wait::Woken) return "closed by HookScope";
    const ssize_t n = m_socket->receive(buffer.data(), buffer.size());
    if (n == 0 || (n < 0 && (errno == ECONNRESET || errno == EPIPE))) {
      return m_clean ? closedText()
                     : "the script disconnected without closing after " + std::to_string(m_stepsDone.load()) +
                           " steps (it ended, crashed or was killed)";
    }
    if (n < 0) return std::string("receiving failed: ") + std::strerror(errno);
    reader.feed(buffer.data(), std::size_t(n));
    wire::Frame frame;
    while (reader.next(&frame)) {
      if (!handleFrame(frame, &error)) return fail(error);
      if (m_clean) return closedText();
    }
    if (!reader.error().empty()) return fail(reader.error());
  }
}

bool ScriptLink::handleFrame(const wire::Frame& frame, std::string* error) {
  if (frame.type == wire::kStatsFrame) return m_intake.readStatsRows(frame.payload, error);
  json message;
  try {
    if (const std::string deep = checkJsonDepth(frame.payload); !deep.empty()) throw std::runtime_error(deep);
    message = json::parse(frame.payload);
  } catch (const std::exception& e) {
    *error = std::string("a message is not JSON: ") + e.what();
    return false;
  }
  if (!message.is_object() || !message.contains("type") || !message["type"].is_string()) {
    *error = "a message has no type";
    return false;
  }
  const std::string type = message["type"];
  try {
    if (type == "capture") {
      *error = "a capture message with tensor bytes (protocol 1): " + wire::versionAdvice(1);
      return false;
    }
    if (type == "step") return handleStep(message, error);
    if (type == "stats") return m_intake.readStats(message, error);
    if (type == "series") return m_intake.readSeries(message, error);
    if (type == "configured" || type == "failed") {
      if (m_onEngineEvent) m_onEngineEvent(type, wireString(message, "message"));
      return true;
    }
    if (type == "bye") {
      m_stoppedByUs = message.value("stopped", false);
      m_clean = true;
      return true;
    }
    if (type == "paused") {
      bool ok = true;
      const auto step = wireInt(message, "step", 0, std::numeric_limits<std::int64_t>::max(), &ok);
      if (ok && m_pausedHeard) m_pausedHeard(step);
      if (ok && m_onEngineEvent) m_onEngineEvent(type, std::to_string(step));
      return true;
    }
  } catch (const std::exception& e) {  // a field of the wrong JSON type
    *error = "a " + type + " message is malformed: " + e.what();
    return false;
  }
  return true;  // unknown messages are skipped: a newer client may send more
}

bool ScriptLink::handleStep(const json& message, std::string* error) {
  AttachedStep done;
  GapRecord gap;
  if (!m_intake.readStep(message, &done, &gap, error)) return false;
  StepAnswer answer;
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(m_stateMutex);
    answer = m_gate.check(*m_store, m_intake.order(), std::move(gap), rank(), &done, &reason);
  }
  if (!m_jobGate) release(done.step, answer, reason);
  m_intake.finishStep(&done);
  m_stepsDone = m_intake.stepsDone();
  if (m_onStep) m_onStep(done);
  if (m_jobGate) m_jobGate(done);
  return true;
}

void ScriptLink::close() { m_socket->wake(); }

void ScriptLink::refuse(const std::string& message) {
  m_socket->sendError(message);
  m_socket->hangUp();
}

void ScriptLink::setRuleSettings(const RuleSettings& settings) {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  m_gate.setRules(settings, rank(), m_hello.modules);
}

std::vector<Alert> ScriptLink::alerts() const {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  return m_gate.alerts();
}

std::vector<GapRecord> ScriptLink::gaps() const {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  return m_gate.gaps();
}

// What HookScope sends: commands may come from any thread; one before the welcome waits for it.

void ScriptLink::sendOrQueue(const std::string& jsonText) {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  if (m_welcomed) {
    m_socket->send(jsonText);
  } else if (!m_served) {
    m_beforeWelcome.push_back(jsonText);  // serve() sends it right after the welcome
  }
}

std::string ScriptLink::controlsMessage(const char* type) const {
  return m_controls.message(type, m_gate.armed(), m_bins, m_paused.load());
}

void ScriptLink::sendControlsLocked(bool changed) {
  if (changed && m_welcomed) m_socket->send(controlsMessage("hooks"));
}

void ScriptLink::setHooks(int module, std::uint8_t mask) {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  sendControlsLocked(m_controls.setHooks(module, mask));
}

void ScriptLink::setAllHooks(const std::vector<std::uint8_t>& masks) {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  sendControlsLocked(m_controls.setAllHooks(masks));
}

std::vector<std::uint8_t> ScriptLink::hooks() const {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  return m_controls.hooks();
}

void ScriptLink::setGradientIntervention(int module, GradientIntervention intervention) {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  sendControlsLocked(m_controls.setGradientIntervention(module, intervention, m_stepsDone.load()));
}

void ScriptLink::setOutputIntervention(int module, OutputIntervention intervention) {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  sendControlsLocked(m_controls.setOutputIntervention(module, intervention, m_stepsDone.load()));
}

std::vector<InterventionRecord> ScriptLink::interventions() const {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  return m_controls.interventions(m_stepsDone.load());
}

void ScriptLink::pause() {
  m_paused = true;
  sendOrQueue(R"({"type":"pause"})");
}

void ScriptLink::resume() {
  m_paused = false;
  sendOrQueue(R"({"type":"run"})");
}

void ScriptLink::step(int count) {
  m_paused = true;  // after those steps
  sendOrQueue(wireText(json{{"type", "step"}, {"count", std::max(1, count)}}));
}

void ScriptLink::stop(const std::string& reason) { sendOrQueue(wireText(json{{"type", "stop"}, {"reason", reason}})); }

void ScriptLink::setBreakRules(std::uint32_t mask, bool stopOnBreak) {
  bool changed;
  {
    std::lock_guard<std::mutex> lock(m_stateMutex);
    changed = m_gate.setBreakRules(mask, stopOnBreak);
  }
  if (changed && m_welcomed) m_socket->send(wireText(json{{"type", "sync"}, {"on", mask != 0}}));
}

void ScriptLink::setOnEngineEvent(std::function<void(const std::string&, const std::string&)> onEvent) {
  m_onEngineEvent = std::move(onEvent);
}

void ScriptLink::configure(const std::string& configText) {
  json config;
  try {
    config = json::parse(configText);
  } catch (const std::exception&) {
    return;  // runConfigText's own output: cannot happen
  }
  sendOrQueue(wireText(json{{"type", "configure"}, {"config", config}}));
}

void ScriptLink::setGate(std::function<void(const AttachedStep&)> gate, std::function<void(std::int64_t)> paused) {
  m_jobGate = std::move(gate);
  m_pausedHeard = std::move(paused);
}

void ScriptLink::release(std::int64_t step, StepAnswer answer, const std::string& reason) {
  // The pause comes before the acknowledgement the script waits for, so it stops at this step.
  if (answer == StepAnswer::Pause) {
    m_paused = true;
    m_socket->send(R"({"type":"pause"})");
  } else if (answer == StepAnswer::Stop) {
    m_socket->send(wireText(json{{"type", "stop"}, {"reason", reason}}));
  }
  m_socket->send(wireText(json{{"type", "ack"}, {"step", step}}));
}

} // namespace hookscope
