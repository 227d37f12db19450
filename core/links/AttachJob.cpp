#include "links/AttachJob.h"

#include <algorithm>
#include <chrono>

namespace hookscope {

namespace {

bool sameTree(const std::vector<ModuleInfo>& a, const std::vector<ModuleInfo>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].path != b[i].path || a[i].typeName != b[i].typeName) return false;
  }
  return true;
}

} // namespace

AttachJob::AttachJob(std::shared_ptr<CaptureStore> store) : m_store(std::move(store)) {}

AttachJob::~AttachJob() {
  close();
  for (auto& [rank, r] : m_ranks) {
    if (r.thread.joinable()) r.thread.join();
  }
}

void AttachJob::setOnStep(std::function<void(int, const AttachedStep&)> onStep) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_onStep = std::move(onStep);
}

void AttachJob::setOnEnded(std::function<void(int, const std::string&)> onEnded) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_onEnded = std::move(onEnded);
}

void AttachJob::setOnSettled(JobGate::OnSettled onSettled) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_onSettled = std::move(onSettled);
}

void AttachJob::setOnEngineEvent(std::function<void(int, const std::string&, const std::string&)> onEvent) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_onEngineEvent = std::move(onEvent);
}

void AttachJob::configure(const std::string& configText) {
  std::lock_guard<std::mutex> lock(m_mutex);
  for (auto& [rank, r] : m_ranks) {
    if (r.alive && r.link->engine()) r.link->configure(configText);
  }
}

std::optional<EngineHello> AttachJob::engine() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  if (m_ranks.empty()) return std::nullopt;
  return m_ranks.begin()->second.link->engine();
}

bool AttachJob::add(std::unique_ptr<ScriptLink> link, std::string* error) {
  std::unique_lock<std::mutex> lock(m_mutex);
  const ScriptRecord& script = link->script();
  const int rank = script.rank;
  auto refuse = [&](const std::string& message) {
    link->refuse(message);
    *error = message;
    return false;
  };
  if (m_closed) return refuse("HookScope is closing: it takes no more ranks of this job");
  if (!m_ranks.empty()) {
    if (script.job != m_job) {
      return refuse("this script belongs to job '" + script.job + "', HookScope records job '" + m_job +
                    "': record each job with its own window or recorder");
    }
    if (script.worldSize != m_worldSize) {
      return refuse("this rank says the world size is " + std::to_string(script.worldSize) + ", the job's ranks said " +
                    std::to_string(m_worldSize));
    }
    if (m_ranks.count(rank)) {
      return refuse("rank " + std::to_string(rank) + " of job '" + m_job + "' is already attached (" +
                    m_ranks.at(rank).link->script().name + ", pid " +
                    std::to_string(m_ranks.at(rank).link->script().pid) + ")");
    }
    if (!sameTree(link->modules(), m_modules)) {
      return refuse("rank " + std::to_string(rank) + " runs another model than rank " +
                    std::to_string(m_ranks.begin()->first) + " (its module tree differs): every rank must attach the same model");
    }
  } else {
    m_job = script.job;
    m_worldSize = script.worldSize;
    m_modules = link->modules();
    m_parameters = link->parameters();
    if (m_controls.masks.size() != m_modules.size()) m_controls.masks.assign(m_modules.size(), 0);
  }
  ScriptLink* s = link.get();
  m_controls.applyTo(*s);
  s->setOnEngineEvent([this, rank](const std::string& event, const std::string& message) {
    std::function<void(int, const std::string&, const std::string&)> onEvent;
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      onEvent = m_onEngineEvent;
    }
    if (onEvent) onEvent(rank, event, message);
  });
  s->setGate([this, rank](const AttachedStep& step) { onRankStep(rank, step); },
             [this, rank](std::int64_t step) { onRankPaused(rank, step); });
  JobRank& r = m_ranks[rank];
  r.link = std::move(link);
  r.thread = std::thread([this, rank, s] {
    const std::string why = s->serve([this, rank](const AttachedStep& step) {
      std::function<void(int, const AttachedStep&)> onStep;
      {
        std::lock_guard<std::mutex> lock(m_mutex);
        onStep = m_onStep;
      }
      if (onStep) onStep(rank, step);
    });
    onRankEnded(rank, why);
  });
  return true;
}

std::vector<int> AttachJob::ranks() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  std::vector<int> out;
  for (const auto& [rank, r] : m_ranks) out.push_back(rank);
  return out;
}

std::vector<int> AttachJob::liveRanks() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  std::vector<int> out;
  for (const auto& [rank, r] : m_ranks) {
    if (r.alive) out.push_back(rank);
  }
  return out;
}

std::vector<ModuleInfo> AttachJob::modules() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_modules;
}

int AttachJob::worldSize() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_worldSize;
}

bool AttachJob::waitEnded(int timeoutMs) const {
  std::unique_lock<std::mutex> lock(m_mutex);
  auto allEnded = [&] {
    return std::all_of(m_ranks.begin(), m_ranks.end(), [](const auto& entry) { return entry.second.over; });
  };
  if (timeoutMs < 0) {
    m_endedCv.wait(lock, allEnded);
    return true;
  }
  return m_endedCv.wait_for(lock, std::chrono::milliseconds(timeoutMs), allEnded);
}

void AttachJob::setAllHooks(const std::vector<std::uint8_t>& masks) {
  std::lock_guard<std::mutex> lock(m_mutex);
  if (!m_modules.empty() && masks.size() != m_modules.size()) return;
  m_controls.masks = masks;  // before the first rank: for it
  for (auto& [rank, r] : m_ranks) r.link->setAllHooks(masks);
}

void AttachJob::setHooks(int module, std::uint8_t mask) {
  std::lock_guard<std::mutex> lock(m_mutex);
  if (module < 0 || std::size_t(module) >= m_controls.masks.size()) return;
  m_controls.masks[std::size_t(module)] = mask;
  for (auto& [rank, r] : m_ranks) r.link->setHooks(module, mask);
}

std::vector<std::uint8_t> AttachJob::hooks() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_controls.masks;
}

std::int64_t AttachJob::settledStep() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_gate.settled();
}

void AttachJob::setBins(int bins) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_controls.bins = bins;
  for (auto& [rank, r] : m_ranks) r.link->setBins(bins);
}

void AttachJob::setRuleSettings(const RuleSettings& settings) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_controls.settings = settings;
  m_gate.setRuleSettings(settings);
  for (auto& [rank, r] : m_ranks) r.link->setRuleSettings(settings);
}

void AttachJob::setBreakRules(std::uint32_t mask, bool stopOnBreak) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_controls.breakMask = mask;
  m_controls.stopOnBreak = stopOnBreak;
  for (auto& [rank, r] : m_ranks) r.link->setBreakRules(mask, stopOnBreak);
}

void AttachJob::setGradientIntervention(int module, GradientIntervention intervention) {
  std::lock_guard<std::mutex> lock(m_mutex);
  if (intervention.kind == GradientIntervention::None) {
    m_controls.gradientOps.erase(module);
  } else {
    m_controls.gradientOps[module] = intervention;
  }
  for (auto& [rank, r] : m_ranks) r.link->setGradientIntervention(module, intervention);
}

void AttachJob::setOutputIntervention(int module, OutputIntervention intervention) {
  std::lock_guard<std::mutex> lock(m_mutex);
  if (intervention.kind == OutputIntervention::None) {
    m_controls.outputOps.erase(module);
  } else {
    m_controls.outputOps[module] = intervention;
  }
  for (auto& [rank, r] : m_ranks) r.link->setOutputIntervention(module, intervention);
}

void AttachJob::pause() {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_controls.paused = true;
  for (auto& [rank, r] : m_ranks) {
    if (r.alive) r.link->pause();
  }
}

void AttachJob::resume() {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_controls.paused = false;
  for (auto& [rank, r] : m_ranks) {
    r.pausedAt = r.pauseAt = -1;
    if (r.alive) r.link->resume();
  }
}

void AttachJob::step(int count) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_controls.paused = true;  // again after those steps
  for (auto& [rank, r] : m_ranks) {
    r.pauseAt = r.pausedAt >= 0 ? r.pausedAt + std::max(1, count) : -1;
    r.pausedAt = -1;
    if (r.alive) r.link->step(count);
  }
}

bool AttachJob::paused() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_controls.paused;
}

std::map<int, std::int64_t> AttachJob::pausedSteps() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  std::map<int, std::int64_t> out;
  for (const auto& [rank, r] : m_ranks) {
    if (r.alive && r.pausedAt >= 0) out[rank] = r.pausedAt;
  }
  return out;
}

void AttachJob::stop(const std::string& reason) {
  std::lock_guard<std::mutex> lock(m_mutex);
  for (auto& [rank, r] : m_ranks) {
    if (r.alive) r.link->stop(reason);
  }
}

void AttachJob::close() {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_closed = true;  // a rank still on its way in would otherwise be served after this
  for (auto& [rank, r] : m_ranks) r.link->close();
}

void AttachJob::settleLocked() {
  m_gate.settle(m_ranks, m_controls, m_parameters, m_worldSize, m_onSettled);
  m_gate.align(m_ranks, m_controls);
}

void AttachJob::onRankStep(int rank, const AttachedStep& step) {
  std::lock_guard<std::mutex> lock(m_mutex);
  JobRank& r = m_ranks.at(rank);
  r.reported = step.step;
  r.pausedAt = -1;
  if (!step.shapes.empty() && m_shapes.empty()) m_shapes = shapesByModule(step.shapes);
  m_gate.rankEnded(rank, step);
  settleLocked();
}

void AttachJob::onRankPaused(int rank, std::int64_t step) {
  std::lock_guard<std::mutex> lock(m_mutex);
  JobRank& r = m_ranks.at(rank);
  r.pausedAt = step;
  r.pauseAt = -1;
  m_gate.align(m_ranks, m_controls);
}

void AttachJob::onRankEnded(int rank, const std::string& why) {
  std::function<void(int, const std::string&)> onEnded;
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    JobRank& r = m_ranks.at(rank);
    r.alive = false;
    r.ended = why;
    settleLocked();  // steps that waited for it
    onEnded = m_onEnded;
  }
  if (onEnded) onEnded(rank, why);
  {
    // Only now is the rank over for waitEnded(): whoever waits hears of its end after the callback.
    std::lock_guard<std::mutex> lock(m_mutex);
    m_ranks.at(rank).over = true;
  }
  m_endedCv.notify_all();
}

std::optional<Alert> AttachJob::breakAlert() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_gate.breakAlert();
}

bool AttachJob::brokeProtocol() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return std::any_of(m_ranks.begin(), m_ranks.end(), [](const auto& e) { return e.second.link->brokeProtocol(); });
}

// What the job recorded (JobRecord), for the window and the export.

std::vector<Alert> AttachJob::alerts() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return recordLocked().alerts();
}

std::vector<GapRecord> AttachJob::gaps() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return recordLocked().gaps();
}

std::vector<InterventionRecord> AttachJob::interventions() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return recordLocked().interventions();
}

std::vector<ScriptRecord> AttachJob::scripts() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return recordLocked().scripts();
}

ExportManifest AttachJob::manifest() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return recordLocked().manifest(*m_store, m_modules, m_shapes, m_controls.masks, m_controls.bins);
}

ExportManifest AttachJob::modelFileManifest(const std::string& modelFile, const std::string& sha256,
                                            const std::vector<ConfigRecord>& configHistory) const {
  return JobRecord::asModelFile(manifest(), modelFile, sha256, configHistory);
}

} // namespace hookscope
