#include "sessions/AttachSession.h"

#include "wire/AttachListener.h"
#include "wire/WireFrame.h"
#include "wire/WireJson.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>

// The connection of an attached script: its hello and module tree checked, frames received
// and dispatched until it leaves. What its messages report is read in AttachIntake.cpp, what
// HookScope sends it in AttachControl.cpp.

namespace hookscope {

using nlohmann::json;

namespace {

constexpr std::size_t kMaxModules = 1000000;

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

// In an older peer's version when it spoke one, so that it can read why it was refused.
std::string errorFrame(const std::string& message, std::uint8_t version = wire::kProtocolVersion) {
  return wire::encodeFrame(wire::kJsonFrame, wireText(json{{"type", "error"}, {"message", message}}),
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
    // The count with tied parameters once (hookscope 0.2 on); without it, own counts add up.
    ok = true;
    info.totalParams = wireInt(entry, "total", 0, std::numeric_limits<std::int64_t>::max() / 2, &ok);
    if (!ok) info.totalParams = -1;
    if (const auto shared = entry.find("shared"); shared != entry.end() && shared->is_array()) {
      for (const auto& pair : *shared) {
        if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string()) continue;
        if (info.params.size() >= 64) break;
        ParamInfo param;
        param.name = pair[0].get<std::string>().substr(0, kMaxWireStringBytes);
        param.sharedWith = pair[1].get<std::string>().substr(0, kMaxWireStringBytes);
        info.params.push_back(std::move(param));
      }
    }
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
  // A peer that counted each module's parameters itself (tied ones once) is believed; for one
  // that did not, own counts add up the tree.
  const bool counted = std::all_of(modules->begin(), modules->end(), [](const ModuleInfo& m) { return m.totalParams >= 0; });
  if (!counted) {
    for (auto& m : *modules) m.totalParams = m.ownParams;
    for (std::size_t i = modules->size(); i-- > 1;) {
      auto& m = (*modules)[i];
      (*modules)[std::size_t(m.parent)].totalParams += m.totalParams;
    }
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
      session->m_parameters.push_back(name.get<std::string>().substr(0, kMaxWireStringBytes));
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

void AttachSession::close() {
  const char byte = 1;
  (void)!::write(m_wake[1], &byte, 1);
}

void AttachSession::refuse(const std::string& message) {
  sendAll(m_fd, errorFrame(message));
  ::shutdown(m_fd, SHUT_RDWR);
}

} // namespace hookscope
