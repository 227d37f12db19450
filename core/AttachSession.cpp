#include "AttachSession.h"

#include "AttachListener.h"
#include "WireFrame.h"
#include "WireStats.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

namespace hookscope {

using nlohmann::json;

namespace {

constexpr std::size_t kMaxModules = 1000000;
constexpr std::size_t kMaxNameBytes = 4096;
constexpr std::size_t kMaxNamedGaps = 64;

// Numbers travel as JSON numbers, non-finite ones as "nan", "inf", "-inf".
bool wireNumber(const json& value, double* out) {
  if (value.is_number()) {
    *out = value.get<double>();
    return true;
  }
  if (value.is_string()) {
    const std::string& s = value.get_ref<const std::string&>();
    if (s == "nan") *out = std::numeric_limits<double>::quiet_NaN();
    else if (s == "inf") *out = std::numeric_limits<double>::infinity();
    else if (s == "-inf") *out = -std::numeric_limits<double>::infinity();
    else return false;
    return true;
  }
  return false;
}

std::int64_t wireInt(const json& j, const char* key, std::int64_t low, std::int64_t high, bool* ok) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) {
    *ok = false;
    return 0;
  }
  const auto value = it->get<std::int64_t>();
  if (value < low || value > high) *ok = false;
  return value;
}

std::string wireString(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return "";
  std::string s = it->get<std::string>();
  if (s.size() > kMaxNameBytes) {
    std::size_t cut = kMaxNameBytes;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
    s.resize(cut);
  }
  return s;
}

// Reads from the socket, keeping any descriptors that come with the bytes. 0: closed, <0: error.
ssize_t receive(int fd, char* buffer, std::size_t size, std::vector<int>* fds) {
  iovec io{buffer, size};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
  msghdr msg{};
  msg.msg_iov = &io;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int received;
        std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds->push_back(received);
      }
    }
  }
  return n;
}

bool constantTimeEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// Peer bytes can reach a message (a parse error quotes them): never let a bad UTF-8 byte
// make writing JSON throw; it is replaced.
std::string text(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// In an older peer's version when it spoke one, so that it can read why it was refused.
std::string errorFrame(const std::string& message, std::uint8_t version = wire::kProtocolVersion) {
  return wire::encodeFrame(wire::kJsonFrame, text(json{{"type", "error"}, {"message", message}}),
                           version && version < wire::kProtocolVersion ? version : wire::kProtocolVersion);
}

// Builds the module tree from the hello's list, which is in named_modules() order (parents first).
bool buildTree(const json& list, std::vector<ModuleInfo>* modules, std::map<std::string, int>* index,
               std::string* error) {
  if (!list.is_array() || list.empty() || list.size() > kMaxModules) {
    *error = "the hello lists no modules (or over " + std::to_string(kMaxModules) + ")";
    return false;
  }
  for (const auto& entry : list) {
    if (!entry.is_object()) {
      *error = "a module entry of the hello is not an object";
      return false;
    }
    ModuleInfo info;
    info.path = wireString(entry, "path");
    info.typeName = wireString(entry, "type");
    info.qualifiedType = info.typeName;
    bool ok = true;
    info.ownParams = wireInt(entry, "params", 0, std::numeric_limits<std::int64_t>::max() / 2, &ok);
    if (!ok) info.ownParams = 0;
    const int self = int(modules->size());
    if (self == 0) {
      if (!info.path.empty()) {
        *error = "the hello's first module is not the root (path \"\")";
        return false;
      }
      info.name = info.typeName;
    } else {
      if (info.path.empty() || index->count(info.path)) {
        *error = "the hello lists module '" + info.path + "' twice, or a second root";
        return false;
      }
      const auto dot = info.path.rfind('.');
      const std::string parentPath = dot == std::string::npos ? "" : info.path.substr(0, dot);
      const auto parent = index->find(parentPath);
      if (parent == index->end()) {
        *error = "the hello lists module '" + info.path + "' before its parent";
        return false;
      }
      info.name = dot == std::string::npos ? info.path : info.path.substr(dot + 1);
      info.parent = parent->second;
      info.depth = (*modules)[std::size_t(parent->second)].depth + 1;
      (*modules)[std::size_t(parent->second)].children.push_back(self);
    }
    (*index)[info.path] = self;
    modules->push_back(std::move(info));
  }
  for (auto& m : *modules) m.totalParams = m.ownParams;
  for (std::size_t i = modules->size(); i-- > 1;) {
    auto& m = (*modules)[i];
    (*modules)[std::size_t(m.parent)].totalParams += m.totalParams;
  }
  return true;
}

} // namespace

std::unique_ptr<AttachSession> AttachSession::accept(int fd, const std::string& token, bool sameUser,
                                                     std::shared_ptr<CaptureStore> store, std::string* error,
                                                     int timeoutMs) {
  std::unique_ptr<AttachSession> session(new AttachSession());
  session->m_fd = fd;
  session->m_store = std::move(store);
  if (::pipe2(session->m_wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    *error = std::string("cannot make a pipe: ") + std::strerror(errno);
    return nullptr;
  }
  std::uint8_t peerVersion = 0;
  auto refuse = [&](const std::string& message) -> std::unique_ptr<AttachSession> {
    sendAll(fd, errorFrame(message, peerVersion));
    *error = message;
    return nullptr;
  };
  if (sameUser && !peerIsSameUser(fd)) return refuse("a process of another user tried to attach; refused");

  // The hello comes first, within the timeout.
  wire::FrameReader reader;
  std::vector<int> fds;
  wire::Frame frame;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  std::vector<char> buffer(1 << 16);
  while (!reader.next(&frame)) {
    if (!reader.error().empty()) {
      for (int f : fds) ::close(f);
      peerVersion = reader.peerVersion();
      return refuse(reader.error());
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, int(left.count())) <= 0) {
      for (int f : fds) ::close(f);
      return refuse("no hello within " + std::to_string(timeoutMs / 1000) + " s: not a HookScope script");
    }
    const ssize_t n = receive(fd, buffer.data(), buffer.size(), &fds);
    if (n <= 0) {
      for (int f : fds) ::close(f);
      *error = "the peer closed the connection before its hello";
      return nullptr;
    }
    reader.feed(buffer.data(), std::size_t(n));
  }
  for (int f : fds) ::close(f);  // a protocol 1 script's shared memory: not used any more

  json hello;
  try {
    hello = json::parse(frame.payload);
  } catch (const std::exception& e) {
    return refuse(std::string("the hello is not JSON: ") + e.what());
  }
  if (frame.type != wire::kJsonFrame || !hello.is_object() || hello.value("type", "") != "hello") {
    return refuse("the first message is not a hello");
  }
  bool ok = true;
  const auto protocol = wireInt(hello, "protocol", 0, 1 << 20, &ok);
  if (!ok || protocol != wire::kProtocolVersion) return refuse(wire::versionAdvice(int(protocol)));
  if (!token.empty() && !constantTimeEqual(wireString(hello, "token"), token)) {
    return refuse("wrong or missing token: give the full address the window or recorder printed "
                  "(tcp://HOST:PORT?token=...) or set HOOKSCOPE_TOKEN");
  }
  std::string message;
  if (!buildTree(hello.contains("modules") ? hello["modules"] : json(), &session->m_modules, &session->m_moduleIndex,
                 &message)) {
    return refuse(message);
  }
  auto& script = session->m_script;
  script.name = wireString(hello, "name");
  script.pid = wireInt(hello, "pid", 0, std::numeric_limits<std::int64_t>::max(), &ok);
  script.host = wireString(hello, "host");
  script.python = wireString(hello, "python");
  script.torch = wireString(hello, "torch");
  script.device = wireString(hello, "device");
  script.dtype = wireString(hello, "dtype");
  script.optimizer = wireString(hello, "optimizer");
  if (const auto dist = hello.find("dist"); dist != hello.end() && dist->is_object()) {
    ok = true;
    const auto world = wireInt(*dist, "world_size", 1, 1 << 20, &ok);
    const auto rank = wireInt(*dist, "rank", 0, world - 1, &ok);
    if (!ok) return refuse("the hello's dist has no rank in [0, world_size) or no world_size");
    script.rank = int(rank);
    script.worldSize = int(world);
    script.job = wireString(*dist, "job");
  }
  if (const auto engine = hello.find("engine"); engine != hello.end() && engine->is_object()) {
    EngineHello e;
    e.model = wireString(*engine, "model");
    e.exampleInput = wireString(*engine, "example_input");
    e.sha256 = wireString(*engine, "sha256");
    e.confinement = wireString(*engine, "confinement");
    session->m_engine = e;
  }
  if (const auto params = hello.find("parameters"); params != hello.end()) {
    if (!params->is_array() || params->size() > kMaxModules) return refuse("the hello's parameters are not a list of names");
    for (const auto& name : *params) {
      if (!name.is_string()) return refuse("the hello's parameters are not a list of names");
      session->m_parameters.push_back(name.get<std::string>().substr(0, kMaxNameBytes));
    }
  }

  session->m_hooks.assign(session->m_modules.size(), 0);
  session->setRuleSettings(RuleSettings{});
  // Later frames the hello's read already took in are handled by serve().
  wire::Frame rest;
  while (reader.next(&rest)) {
    session->m_early.push_back(std::move(rest));
  }
  return session;
}

AttachSession::~AttachSession() {
  if (m_fd >= 0) ::close(m_fd);
  for (int fd : m_wake) {
    if (fd >= 0) ::close(fd);
  }
}

void AttachSession::setRuleSettings(const RuleSettings& settings) {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  auto rules = std::make_unique<RuleEngine>(settings);
  rules->setRank(m_script.rank);
  std::map<std::string, std::string> types;
  for (const auto& m : m_modules) types[m.path] = m.typeName;
  rules->setModuleTypes(types);
  m_rules = std::move(rules);
}

bool AttachSession::send(const std::string& jsonText) {
  std::lock_guard<std::mutex> lock(m_sendMutex);
  return sendAll(m_fd, wire::encodeFrame(wire::kJsonFrame, jsonText));
}

std::string AttachSession::hooksMessage(const char* type) const {
  json hooks = json::object();
  for (std::size_t i = 0; i < m_hooks.size(); ++i) {
    if (!m_hooks[i]) continue;
    hooks[m_modules[i].path] = captureKindNames(m_hooks[i]);
  }
  json gradient = json::object();
  for (const auto& [module, gi] : m_gradientOps) {
    const char* kind = gi.kind == GradientIntervention::Clamp ? "clamp" : gi.kind == GradientIntervention::Scale ? "scale" : "zero";
    gradient[m_modules[std::size_t(module)].path] = json::array({kind, gi.value});
  }
  json output = json::object();
  for (const auto& [module, oi] : m_outputOps) output[m_modules[std::size_t(module)].path] = oi.describe();
  return text(json{{"type", type},
              {"hooks", hooks},
              {"gradient", gradient},
              {"output", output},
              {"sync", m_breakRules != 0},
              {"bins", m_bins},
              {"paused", m_paused.load()}});
}

void AttachSession::setHooks(int module, std::uint8_t mask) {
  {
    std::lock_guard<std::mutex> lock(m_stateMutex);
    if (module < 0 || std::size_t(module) >= m_hooks.size() || m_hooks[std::size_t(module)] == mask) return;
    m_hooks[std::size_t(module)] = mask;
    if (m_welcomed) send(hooksMessage("hooks"));
  }
}

void AttachSession::setAllHooks(const std::vector<std::uint8_t>& masks) {
  {
    std::lock_guard<std::mutex> lock(m_stateMutex);
    if (masks.size() != m_hooks.size()) return;
    m_hooks = masks;
    if (m_welcomed) send(hooksMessage("hooks"));
  }
}

std::vector<std::uint8_t> AttachSession::hooks() const {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  return m_hooks;
}

void AttachSession::setGradientIntervention(int module, GradientIntervention intervention) {
  {
    std::lock_guard<std::mutex> lock(m_stateMutex);
    if (module < 0 || std::size_t(module) >= m_modules.size()) return;
    logIntervention(&m_interventionLog, m_modules[std::size_t(module)].path, "gradient", intervention.describe(),
                    m_stepsDone.load());
    if (intervention.kind == GradientIntervention::None) {
      m_gradientOps.erase(module);
    } else {
      m_gradientOps[module] = intervention;
    }
    if (m_welcomed) send(hooksMessage("hooks"));
  }
}

void AttachSession::setOutputIntervention(int module, OutputIntervention intervention) {
  {
    std::lock_guard<std::mutex> lock(m_stateMutex);
    if (module <= 0 || std::size_t(module) >= m_modules.size()) return;  // the root's output is the loss's input
    logIntervention(&m_interventionLog, m_modules[std::size_t(module)].path, "output", intervention.describe(),
                    m_stepsDone.load());
    if (intervention.kind == OutputIntervention::None) {
      m_outputOps.erase(module);
    } else {
      m_outputOps[module] = intervention;
    }
    if (m_welcomed) send(hooksMessage("hooks"));
  }
}

std::vector<InterventionRecord> AttachSession::interventions() const {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  auto out = m_interventionLog;
  for (auto& record : out) {
    if (record.toStep < 0) record.toStep = std::max<std::int64_t>(record.fromStep, m_stepsDone - 1);
  }
  return out;
}

void AttachSession::sendOrQueue(const std::string& jsonText) {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  if (m_welcomed) {
    send(jsonText);
  } else if (!m_served) {
    m_beforeWelcome.push_back(jsonText);  // serve() sends it right after the welcome
  }
}

void AttachSession::pause() {
  m_paused = true;
  sendOrQueue(R"({"type":"pause"})");
}

void AttachSession::resume() {
  m_paused = false;
  sendOrQueue(R"({"type":"run"})");
}

void AttachSession::step(int count) {
  m_paused = true;  // after those steps
  sendOrQueue(text(json{{"type", "step"}, {"count", std::max(1, count)}}));
}

void AttachSession::stop(const std::string& reason) { sendOrQueue(text(json{{"type", "stop"}, {"reason", reason}})); }

void AttachSession::setBreakRules(std::uint32_t mask, bool stopOnBreak) {
  bool changed;
  {
    std::lock_guard<std::mutex> lock(m_stateMutex);
    changed = (m_breakRules != 0) != (mask != 0);
    m_breakRules = mask;
    m_stopOnBreak = stopOnBreak;
  }
  if (changed && m_welcomed) send(text(json{{"type", "sync"}, {"on", mask != 0}}));
}

void AttachSession::close() {
  const char byte = 1;
  (void)!::write(m_wake[1], &byte, 1);
}

void AttachSession::refuse(const std::string& message) {
  sendAll(m_fd, errorFrame(message));
  ::shutdown(m_fd, SHUT_RDWR);
}

std::vector<Alert> AttachSession::alerts() const {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  return m_rules->alerts();
}

std::vector<GapRecord> AttachSession::gaps() const {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  return m_gaps;
}

std::string AttachSession::serve(const std::function<void(const AttachedStep&)>& onStep) {
  m_onStep = onStep;
  // However it ends, the script sees the connection close (and detaches, training on), even
  // while this session is kept for its captures.
  struct Hangup {
    AttachSession* self;
    ~Hangup() {
      self->m_welcomed = false;
      ::shutdown(self->m_fd, SHUT_RDWR);
    }
  } hangup{this};
  {
    // Under the state lock, so that every change after it follows it on the wire.
    std::lock_guard<std::mutex> lock(m_stateMutex);
    m_welcomed = true;
    m_served = true;
    if (!send(hooksMessage("welcome"))) return "the script went away during its welcome";
    for (const auto& queued : m_beforeWelcome) send(queued);
    m_beforeWelcome.clear();
  }
  try {
    return receiveFrames();
  } catch (const std::exception& e) {  // whatever a script sends, the viewer goes on
    m_broken = true;
    sendAll(m_fd, errorFrame(std::string("HookScope could not handle a message: ") + e.what()));
    return std::string("the script sent a message HookScope could not handle, so it ended the connection: ") + e.what();
  }
}

std::string AttachSession::closedText() const {
  return (m_stoppedByUs ? "stopped by HookScope after " : "closed by the script after ") +
         std::to_string(m_stepsDone.load()) + " steps";
}

std::string AttachSession::receiveFrames() {
  m_lastStepEnd = std::chrono::steady_clock::now();
  auto fail = [&](const std::string& problem) {
    m_broken = true;
    sendAll(m_fd, errorFrame(problem));
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
    pollfd fds[2] = {{m_fd, POLLIN, 0}, {m_wake[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return std::string("poll failed: ") + std::strerror(errno);
    }
    if (fds[1].revents) return "closed by HookScope";
    std::vector<int> fdsIn;
    const ssize_t n = receive(m_fd, buffer.data(), buffer.size(), &fdsIn);
    for (int f : fdsIn) ::close(f);
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

bool AttachSession::handleFrame(const wire::Frame& frame, std::string* error) {
  json message;
  try {
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
    if (type == "stats") return handleStats(message, error);
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

bool AttachSession::seriesKey(const json& message, CaptureKind kind, std::int64_t call, std::int64_t index,
                              const char* what, SeriesKey* key, std::string* error) const {
  key->call = int(call);
  key->kind = kind;
  key->index = int(index);
  key->rank = m_script.rank;
  if (isParameterKind(kind)) {
    key->module = wireString(message, "param");
    key->call = 0;
    if (key->module.empty()) {
      *error = std::string(what) + " of a parameter kind names no parameter";
      return false;
    }
    return true;
  }
  bool ok = true;
  const auto module = wireInt(message, "module", 0, std::int64_t(m_modules.size()) - 1, &ok);
  if (!ok) {
    *error = std::string(what) + " names no module of the hello";
    return false;
  }
  key->module = m_modules[std::size_t(module)].path;
  return true;
}

// Statistics a script or an engine computed in its own process, where the tensors live.
bool AttachSession::handleStats(const json& message, std::string* error) {
  bool ok = true;
  const auto step = wireInt(message, "step", 0, std::numeric_limits<std::int64_t>::max(), &ok);
  if (!ok || step != m_step) {
    *error = "statistics of step " + std::to_string(step) + " came during step " + std::to_string(m_step);
    return false;
  }
  const auto list = message.find("captures");
  if (list == message.end() || !list->is_array()) {
    *error = "a stats message has no captures";
    return false;
  }
  for (const auto& entry : *list) {
    if (!entry.is_object()) {
      *error = "a stats entry is not an object";
      return false;
    }
    const auto call = wireInt(entry, "call", 0, std::numeric_limits<int>::max(), &ok);
    const auto index = wireInt(entry, "index", 0, std::numeric_limits<int>::max(), &ok);
    const auto kind = parseCaptureKind(wireString(entry, "kind"));
    if (!ok || !kind) {
      *error = "a stats entry lacks call, index or kind, or has one out of range";
      return false;
    }
    SeriesKey key;
    if (!seriesKey(entry, *kind, call, index, "a stats entry", &key, error)) return false;
    TensorStats stats;
    if (!statsFromWire(entry, &stats, error)) return false;
    if (key.kind == CaptureKind::Activation) m_order.forward.push_back(key);
    if (key.kind == CaptureKind::Gradient) m_order.backward.push_back(key);
    m_store->add(step, key, std::move(stats));
    ++m_stepCaptures;
  }
  return true;
}

void AttachSession::setOnEngineEvent(std::function<void(const std::string&, const std::string&)> onEvent) {
  m_onEngineEvent = std::move(onEvent);
}

void AttachSession::configure(const std::string& configText) {
  json config;
  try {
    config = json::parse(configText);
  } catch (const std::exception&) {
    return;  // runConfigText's own output: cannot happen
  }
  sendOrQueue(text(json{{"type", "configure"}, {"config", config}}));
}

bool AttachSession::handleStep(const json& message, std::string* error) {
  bool ok = true;
  const auto step = wireInt(message, "step", 0, std::numeric_limits<std::int64_t>::max(), &ok);
  if (!ok || step != m_step) {
    *error = "step " + std::to_string(step) + " ended, but step " + std::to_string(m_step) + " was running";
    return false;
  }
  AttachedStep done;
  done.step = step;
  done.captures = m_stepCaptures;
  if (const auto it = message.find("scalars"); it != message.end() && it->is_object()) {
    for (const auto& [name, value] : it->items()) {
      double number = 0;
      if (name.empty() || name.size() > 256 || !wireNumber(value, &number)) continue;
      done.scalars[name] = number;
      m_store->addScalar(step, name, number, m_script.rank);
    }
  }
  GapRecord gap{step, 0, 0, m_script.rank, {}};
  if (const auto it = message.find("dropped"); it != message.end() && it->is_object()) {
    bool counted = true;
    done.droppedCaptures = wireInt(*it, "captures", 0, std::numeric_limits<std::int64_t>::max(), &counted);
    if (!counted) done.droppedCaptures = 0;
    if (it->contains("bytes")) done.droppedBytes = wireInt(*it, "bytes", 0, std::numeric_limits<std::int64_t>::max(), &counted);
    if (!counted) done.droppedBytes = 0;
    if (done.droppedCaptures > 0) m_store->addScalar(step, "dropped_captures", double(done.droppedCaptures), m_script.rank);
    // Which series lost this step, and why (the script names up to 64 of them).
    if (const auto list = it->find("series"); list != it->end() && list->is_array()) {
      for (const auto& entry : *list) {
        if (gap.series.size() >= kMaxNamedGaps || !entry.is_object()) break;
        bool fine = true;
        const auto call = wireInt(entry, "call", 0, std::numeric_limits<int>::max(), &fine);
        const auto index = wireInt(entry, "index", 0, std::numeric_limits<int>::max(), &fine);
        const auto kind = parseCaptureKind(wireString(entry, "kind"));
        SeriesKey key;
        std::string ignored;
        if (!fine || !kind || !seriesKey(entry, *kind, call, index, "a gap", &key, &ignored)) continue;
        gap.series.push_back({key, wireString(entry, "reason")});
      }
    }
  }
  if (const auto it = message.find("fingerprint"); it != message.end() && it->is_object()) {
    // Per parameter [sum, norm] of its values and of its gradient (null: no gradient).
    auto prints = [&](const char* field, std::vector<std::array<double, 2>>* out) {
      const auto list = it->find(field);
      if (list == it->end() || !list->is_array() || list->size() != m_parameters.size()) return;
      for (const auto& pair : *list) {
        std::array<double, 2> v{std::nan(""), std::nan("")};
        if (pair.is_array() && pair.size() == 2) {
          wireNumber(pair[0], &v[0]);
          wireNumber(pair[1], &v[1]);
        }
        out->push_back(v);
      }
    };
    prints("params", &done.parameterPrints);
    prints("grads", &done.gradientPrints);
  }
  if (const auto it = message.find("shapes"); it != message.end() && it->is_object()) {
    for (const auto& [module, calls] : it->items()) {
      const auto index = std::strtoll(module.c_str(), nullptr, 10);
      if (index < 0 || index >= std::int64_t(m_modules.size()) || !calls.is_array()) continue;
      int call = 0;
      for (const auto& tensors : calls) {  // per call, the shape of each tensor of the output
        ModuleCallShape shape{m_modules[std::size_t(index)].path, call++, {}};
        if (tensors.is_array()) {
          for (const auto& text : tensors) {
            if (text.is_string()) shape.shapes.push_back(text.get<std::string>());
          }
        }
        done.shapes.push_back(std::move(shape));
      }
    }
  }
  StepAnswer answer = StepAnswer::Go;
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(m_stateMutex);
    done.alerts = m_rules->evaluate(*m_store, step, m_order);
    m_store->setAlertBytes(m_rules->bytes(), m_script.rank);
    if (done.droppedCaptures > 0) {
      gap.captures = done.droppedCaptures;
      gap.bytes = done.droppedBytes;
      m_gaps.push_back(std::move(gap));
    }
    for (const auto& alert : done.alerts) {
      if (m_breakRules & (1u << unsigned(alert.rule))) {
        done.breakAlert = alert;
        break;
      }
    }
    if (done.breakAlert) {
      answer = m_stopOnBreak ? StepAnswer::Stop : StepAnswer::Pause;
      reason = std::string("HookScope stopped the run at step ") + std::to_string(step) + " on " +
               ruleName(done.breakAlert->rule) + ": " + done.breakAlert->message;
    }
  }
  if (!m_gate) release(step, answer, reason);
  const auto now = std::chrono::steady_clock::now();
  done.seconds = std::chrono::duration<double>(now - m_lastStepEnd).count();
  m_lastStepEnd = now;
  m_step = step + 1;
  m_stepsDone = m_step;
  m_order = StepOrder{};
  m_stepCaptures = 0;
  if (m_onStep) m_onStep(done);
  if (m_gate) m_gate(done);
  return true;
}

void AttachSession::setGate(std::function<void(const AttachedStep&)> gate, std::function<void(std::int64_t)> paused) {
  m_gate = std::move(gate);
  m_pausedHeard = std::move(paused);
}

void AttachSession::release(std::int64_t step, StepAnswer answer, const std::string& reason) {
  // The pause comes before the acknowledgement the script waits for, so it stops at this step.
  if (answer == StepAnswer::Pause) {
    m_paused = true;
    send(R"({"type":"pause"})");
  } else if (answer == StepAnswer::Stop) {
    send(text(json{{"type", "stop"}, {"reason", reason}}));
  }
  send(text(json{{"type", "ack"}, {"step", step}}));
}

} // namespace hookscope
