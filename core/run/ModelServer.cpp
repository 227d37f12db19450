#include "run/ModelServer.h"
#include "common/FileLimits.h"

#include "wire/AttachListener.h"
#include "files/ExportManifest.h"
#include "common/PrintableText.h"
#include "run/StepRunner.h"
#include "wire/WireFrame.h"
#include "wire/WireJson.h"
#include "wire/WireStats.h"

#include <nlohmann/json.hpp>
#include <torch/version.h>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <set>

namespace hookscope {

using nlohmann::json;

namespace {

/// Captures per `stats` message: about 0.7 KB each keeps a message far under the JSON limit.
constexpr std::size_t kCapturesPerMessage = 4000;

std::string hostName() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

class Server {
public:
  Server(Model& model, int fd, const ServeOptions& options)
      : m_model(model), m_fd(fd), m_options(options), m_store(std::make_shared<CaptureStore>(std::size_t(1) << 62)),
        m_runner(model, m_store) {}

  std::string run(bool* clean);

private:
  bool send(const json& message) { return sendAll(m_fd, wire::encodeFrame(wire::kJsonFrame, wireText(message))); }
  json hello() const;
  /// Reads and handles what has come, waiting up to `timeoutMs` (-1: until something does).
  bool receive(int timeoutMs);
  bool handle(const json& message);
  void applyHooks(const json& message);
  void configure(const json& message);
  void failed(const std::string& message);
  /// Runs one step and sends its statistics; false when it failed.
  bool step();
  void sendPausedIfDue();

  Model& m_model;
  int m_fd;
  ServeOptions m_options;
  std::shared_ptr<CaptureStore> m_store;
  StepRunner m_runner;
  wire::FrameReader m_reader;
  RunConfig m_config;
  bool m_configured = false;
  bool m_wantShapes = true;
  bool m_running = false;
  bool m_pausedDue = false;  ///< a `paused` is owed once the step in progress is over
  std::int64_t m_stepsLeft = -1;
  bool m_sync = false;
  std::int64_t m_acked = -1;
  bool m_done = false;
  bool m_clean = false;
  std::string m_ended;
};

json Server::hello() const {
  json modules = json::array();
  for (const auto& m : m_model.modules()) {
    json entry = {{"path", m.path}, {"type", m.typeName}, {"params", m.ownParams}, {"total", m.totalParams}};
    json shared = json::array();
    for (const auto& p : m.params) {
      if (!p.sharedWith.empty()) shared.push_back({p.name, p.sharedWith});
    }
    if (!shared.empty()) entry["shared"] = shared;
    modules.push_back(std::move(entry));
  }
  json engine = {{"model", m_model.path()},
                 {"example_input", m_model.exampleInputSpec()},
                 {"sha256", m_options.sha256},
                 {"confinement", m_options.confinement}};
  return {{"type", "hello"},
          {"protocol", wire::kProtocolVersion},
          {"name", m_model.fileName()},
          {"pid", ::getpid()},
          {"host", hostName()},
          {"python", ""},
          {"torch", TORCH_VERSION},
          {"device", "cpu"},
          {"dtype", "float32"},
          {"optimizer", ""},
          {"token", m_options.token},
          {"modules", modules},
          {"engine", engine}};
}

std::string Server::run(bool* clean) {
  if (!send(hello())) {
    *clean = false;
    return "HookScope went away before the engine's hello";
  }
  while (!m_done) {
    if (!m_running) {
      sendPausedIfDue();
      if (!receive(-1)) break;
      continue;
    }
    if (!receive(0)) break;  // commands that came during the last step
    if (!m_running || m_done) continue;
    // Step n starts once HookScope has acknowledged step n-2: the engine is at most one step ahead
    // of what HookScope has taken in, so a change of hooks, a pause or a stop takes effect within
    // two steps of the last one HookScope received, not after a socket buffer's worth of steps.
    if (m_acked < m_runner.stepsDone() - 2) {
      if (!receive(-1)) break;
      continue;
    }
    const bool ok = step();
    if (ok && m_stepsLeft > 0 && --m_stepsLeft == 0) {
      m_running = false;
      m_pausedDue = true;
    }
  }
  *clean = m_clean;
  return m_ended;
}

bool Server::receive(int timeoutMs) {
  std::vector<char> buffer(1 << 16);
  pollfd p{m_fd, POLLIN, 0};
  int ready;
  do {
    ready = ::poll(&p, 1, timeoutMs);
  } while (ready < 0 && errno == EINTR);
  if (ready == 0) return true;
  const ssize_t n = ready < 0 ? -1 : ::recv(m_fd, buffer.data(), buffer.size(), 0);
  if (n <= 0) {
    m_done = true;
    m_clean = true;  // the window closed the engine (or died): either way nothing more to do
    m_ended = "HookScope closed the connection";
    return false;
  }
  m_reader.feed(buffer.data(), std::size_t(n));
  wire::Frame frame;
  while (!m_done && m_reader.next(&frame)) {
    if (frame.type != wire::kJsonFrame) continue;
    json message;
    try {
      if (const std::string deep = checkJsonDepth(frame.payload); !deep.empty()) throw std::runtime_error(deep);
      message = json::parse(frame.payload);
    } catch (const std::exception& e) {
      m_done = true;
      m_ended = std::string("HookScope sent a message that is not JSON: ") + e.what();
      return false;
    }
    try {
      if (!handle(message)) return false;
    } catch (const std::exception& e) {  // a field of the wrong type
      m_done = true;
      m_ended = std::string("HookScope sent a malformed message: ") + e.what();
      return false;
    }
  }
  if (!m_reader.error().empty()) {
    m_done = true;
    m_ended = "the connection to HookScope broke: " + m_reader.error();
    return false;
  }
  return !m_done;
}

bool Server::handle(const json& message) {
  if (!message.is_object()) return true;
  const std::string type = message.value("type", "");
  if (type == "welcome" || type == "hooks") {
    applyHooks(message);
    if (const auto sync = message.find("sync"); sync != message.end() && sync->is_boolean()) m_sync = sync->get<bool>();
    if (type == "welcome" && !message.value("paused", true) && m_configured) m_running = true;
  } else if (type == "configure") {
    configure(message);
  } else if (type == "run" || type == "step") {
    if (!m_configured) {
      failed("the engine has no run configuration yet: HookScope sends one before it runs");
      return true;
    }
    m_running = true;
    m_stepsLeft = type == "run" ? -1 : std::max<std::int64_t>(1, message.value("count", std::int64_t(1)));
  } else if (type == "pause") {
    if (m_running) m_running = false;
    m_pausedDue = true;
  } else if (type == "sync") {
    m_sync = message.value("on", false);
  } else if (type == "ack") {
    m_acked = std::max(m_acked, message.value("step", std::int64_t(-1)));
  } else if (type == "stop") {
    send({{"type", "bye"}, {"stopped", true}});
    m_done = true;
    m_clean = true;
    m_ended = "stopped by HookScope: " + message.value("reason", std::string());
    return false;
  } else if (type == "error") {
    m_done = true;
    m_ended = "HookScope refused the engine: " + message.value("message", std::string());
    return false;
  }
  return true;  // unknown messages are skipped
}

void Server::applyHooks(const json& message) {
  const auto& modules = m_model.modules();
  std::vector<std::uint8_t> masks(modules.size(), 0);
  std::vector<GradientIntervention> gradient(modules.size());
  std::vector<OutputIntervention> output(modules.size());
  if (const auto it = message.find("hooks"); it != message.end() && it->is_object()) {
    for (const auto& [path, kinds] : it->items()) {
      const int module = m_model.findModule(path);
      if (module < 0 || !kinds.is_array()) continue;
      for (const auto& kind : kinds) {
        if (!kind.is_string()) continue;
        if (const auto k = parseCaptureKind(kind.get<std::string>())) masks[std::size_t(module)] |= kindBit(*k);
      }
    }
  }
  if (const auto it = message.find("gradient"); it != message.end() && it->is_object()) {
    for (const auto& [path, op] : it->items()) {
      const int module = m_model.findModule(path);
      if (module < 0 || !op.is_array() || op.size() != 2 || !op[0].is_string() || !op[1].is_number()) continue;
      const std::string kind = op[0].get<std::string>();
      GradientIntervention gi;
      gi.kind = kind == "clamp" ? GradientIntervention::Clamp
                : kind == "scale" ? GradientIntervention::Scale
                : kind == "zero"  ? GradientIntervention::Zero
                                  : GradientIntervention::None;
      gi.value = op[1].get<double>();
      gradient[std::size_t(module)] = gi;
    }
  }
  if (const auto it = message.find("output"); it != message.end() && it->is_object()) {
    for (const auto& [path, op] : it->items()) {
      const int module = m_model.findModule(path);
      if (module <= 0 || !op.is_string()) continue;
      OutputIntervention oi;
      oi.kind = op == "zero" ? OutputIntervention::Zero : op == "mean" ? OutputIntervention::Mean : OutputIntervention::None;
      output[std::size_t(module)] = oi;
    }
  }
  for (std::size_t i = 0; i < modules.size(); ++i) {
    m_model.setHooks(int(i), masks[i]);
    m_model.setGradientIntervention(int(i), gradient[i]);
    if (i > 0) m_model.setOutputIntervention(int(i), output[i]);
  }
}

void Server::configure(const json& message) {
  RunConfig config;
  std::string error;
  const auto it = message.find("config");
  if (it == message.end() || !parseRunConfig(it->dump(), &config, &error)) {
    failed(error.empty() ? "a configure message without a configuration" : error);
    return;
  }
  if (!m_runner.configure(config, &error)) {
    m_configured = false;  // a run needs a configuration that works
    failed(error);
    return;
  }
  if (!m_configured || config.inputSpecs != m_config.inputSpecs || config.dataFile != m_config.dataFile ||
      config.batchSize != m_config.batchSize) {
    m_wantShapes = true;  // new inputs give new output shapes
  }
  m_config = config;
  m_configured = true;
  send({{"type", "configured"}});
}

void Server::failed(const std::string& message) {
  // What was asked for does not happen: the run ends here and the engine waits for the next.
  m_running = false;
  m_pausedDue = true;
  // LibTorch's and the model's words may hold bytes that are not UTF-8: escaped (\xNN) here, as
  // everywhere HookScope prints them, rather than replaced by U+FFFD on the wire.
  send({{"type", "failed"}, {"step", m_runner.stepsDone()}, {"message", printableText(message)}});
}

void Server::sendPausedIfDue() {
  if (!m_pausedDue) return;
  m_pausedDue = false;
  if (m_runner.stepsDone() > 0) send({{"type", "paused"}, {"step", m_runner.stepsDone() - 1}});
}

bool Server::step() {
  if (m_wantShapes) m_runner.probeShapes();
  StepResult result;
  std::string error;
  if (!m_runner.step(&result, &error)) {
    failed(error);
    return false;
  }
  const std::int64_t s = result.step;
  // Activations in the order their calls returned and gradients in the order backward reached
  // them, as a script's hooks would send them: the rules read that order.
  std::vector<SeriesKey> keys;
  std::set<SeriesKey> seen;
  const StepOrder order = m_runner.lastStepOrder();
  for (const auto* list : {&order.forward, &order.backward}) {
    for (const auto& key : *list) {
      if (seen.insert(key).second) keys.push_back(key);
    }
  }
  for (const auto& key : m_store->seriesKeys()) {
    if (seen.insert(key).second) keys.push_back(key);
  }
  json captures = json::array();
  auto flush = [&] {
    if (captures.empty()) return;
    send({{"type", "stats"}, {"step", s}, {"captures", captures}});
    captures = json::array();
  };
  for (const auto& key : keys) {
    SeriesPoint point;
    if (!m_store->pointAt(key, s, &point) || point.step != s) continue;
    json entry = statsToWire(point.stats);
    entry["kind"] = captureKindName(key.kind);
    entry["call"] = key.call;
    entry["index"] = key.index;
    if (isParameterKind(key.kind)) {
      entry["param"] = key.module;
    } else {
      entry["module"] = m_model.findModule(key.module);
    }
    captures.push_back(std::move(entry));
    if (captures.size() >= kCapturesPerMessage) flush();
  }
  flush();
  json scalars = {{"loss", wireNumberJson(result.loss)},
                  {"lr", m_config.optimizer == OptimizerKind::None || m_config.noGrad ? 0.0 : m_config.lr},
                  {"step_ms", result.totalMs},
                  {"forward_ms", result.forwardMs},
                  {"backward_ms", result.backwardMs},
                  {"optimizer_ms", result.optimizerMs},
                  {"capture_ms", result.captureMs}};
  json message = {{"type", "step"}, {"step", s}, {"scalars", scalars}};
  if (m_wantShapes) {
    json shapes = json::object();
    for (const auto& call : m_runner.outputShapes()) {
      const int module = m_model.findModule(call.module);
      if (module < 0) continue;
      auto& calls = shapes[std::to_string(module)];
      if (calls.is_null()) calls = json::array();
      while (int(calls.size()) <= call.call) calls.push_back(json::array());
      calls[std::size_t(call.call)] = call.shapes;
    }
    message["shapes"] = shapes;
    m_wantShapes = false;
  }
  m_store->clear();
  if (!send(message)) {
    m_done = true;
    m_clean = true;
    m_ended = "HookScope closed the connection";
    return false;
  }
  // With a breakpoint armed, the step is not over until HookScope has checked it: a pause it
  // sends comes before the acknowledgement, so the run stops at this step.
  while (m_sync && m_acked < s && !m_done) {
    if (!receive(-1)) return false;
  }
  return true;
}

} // namespace

std::string serveModel(Model& model, int fd, const ServeOptions& options, bool* clean) {
  Server server(model, fd, options);
  return server.run(clean);
}

} // namespace hookscope
