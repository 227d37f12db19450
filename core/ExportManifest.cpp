#include "ExportManifest.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <ctime>

namespace hookscope {

using nlohmann::json;

std::string utcTimestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

void logIntervention(std::vector<InterventionRecord>* log, const std::string& module, const std::string& target,
                     const std::string& action, std::int64_t step) {
  for (auto& record : *log) {
    if (record.module == module && record.target == target && record.toStep < 0) record.toStep = step - 1;
  }
  log->erase(std::remove_if(log->begin(), log->end(),
                            [](const InterventionRecord& r) { return r.toStep >= 0 && r.toStep < r.fromStep; }),
             log->end());
  if (!action.empty()) log->push_back({module, target, action, step, -1});
}

void logConfig(std::vector<ConfigRecord>* log, const RunConfig& config, std::int64_t step) {
  if (!log->empty() && log->back().toStep < 0) {
    if (log->back().config == config) return;
    log->back().toStep = step - 1;
    if (log->back().toStep < log->back().fromStep) log->pop_back();
  }
  // Changed back before a step ran with the other: the earlier record goes on.
  if (!log->empty() && log->back().config == config && log->back().toStep == step - 1) {
    log->back().toStep = -1;
    return;
  }
  log->push_back({step, -1, config});
}

namespace {

json scriptJson(const ScriptRecord& s) {
  return {{"name", s.name},       {"pid", s.pid},     {"host", s.host},          {"python", s.python},
          {"torch", s.torch},     {"device", s.device}, {"dtype", s.dtype},      {"optimizer", s.optimizer},
          {"ended", s.ended},     {"rank", s.rank},   {"world_size", s.worldSize}, {"job", s.job},
          {"steps", s.steps}};
}

ScriptRecord scriptFromJson(const json& s) {
  ScriptRecord r;
  r.name = s.value("name", "");
  r.pid = s.value("pid", std::int64_t(0));
  r.host = s.value("host", "");
  r.python = s.value("python", "");
  r.torch = s.value("torch", "");
  r.device = s.value("device", "");
  r.dtype = s.value("dtype", "");
  r.optimizer = s.value("optimizer", "");
  r.ended = s.value("ended", "");
  r.rank = s.value("rank", 0);
  r.worldSize = s.value("world_size", 1);
  r.job = s.value("job", "");
  r.steps = s.value("steps", std::int64_t(0));
  return r;
}

} // namespace

static json configJson(const RunConfig& config) {
  return {{"inputs", config.inputSpecs},
          {"data_file", config.dataFile},
          {"batch_size", config.batchSize},
          {"loss", lossKindName(config.loss)},
          {"optimizer", optimizerKindName(config.optimizer)},
          {"lr", config.lr},
          {"momentum", config.momentum},
          {"weight_decay", config.weightDecay},
          {"train", config.train},
          {"no_grad", config.noGrad},
          {"seed", config.seed},
          {"bins", config.bins}};
}

static RunConfig configFromJson(const json& j) {
  RunConfig c;
  c.inputSpecs = j.value("inputs", std::vector<std::string>{});
  c.dataFile = j.value("data_file", "");
  c.batchSize = j.value("batch_size", std::int64_t(0));
  c.loss = parseLossKind(j.value("loss", "auto")).value_or(LossKind::Auto);
  c.optimizer = parseOptimizerKind(j.value("optimizer", "none")).value_or(OptimizerKind::None);
  c.lr = j.value("lr", 0.0);
  c.momentum = j.value("momentum", 0.0);
  c.weightDecay = j.value("weight_decay", 0.0);
  c.train = j.value("train", true);
  c.noGrad = j.value("no_grad", false);
  c.seed = j.value("seed", std::uint64_t(0));
  c.bins = j.value("bins", 64);
  return c;
}

std::string runConfigText(const RunConfig& config) { return configJson(config).dump(); }

bool parseRunConfig(const std::string& text, RunConfig* config, std::string* error) {
  try {
    const json j = json::parse(text);
    if (!j.is_object()) throw std::runtime_error("not a JSON object");
    *config = configFromJson(j);
    return true;
  } catch (const std::exception& e) {
    *error = std::string("a run configuration is malformed: ") + e.what();
    return false;
  }
}

std::string ExportManifest::toJson() const {
  json hooks = json::array();
  for (const auto& h : hooked) hooks.push_back({{"module", h.module}, {"kinds", h.kinds}});
  json interventionList = json::array();
  for (const auto& i : interventions) {
    interventionList.push_back({{"module", i.module}, {"target", i.target}, {"action", i.action},
                                {"from_step", i.fromStep}, {"to_step", i.toStep}});
  }
  json thin = json::array();
  for (const auto& t : thinning) {
    thin.push_back({{"at_step", t.atStep},
                    {"steps_before", t.stepsBefore},
                    {"steps_after", t.stepsAfter},
                    {"bytes_before", t.bytesBefore},
                    {"bytes_after", t.bytesAfter},
                    {"stride", t.stride},
                    {"call_stride", t.callStride}});
  }
  json j = {
      {"format", kFormat},
      {"version", kVersion},
      {"model", {{"file", modelFile}, {"sha256", modelSha256}}},
      {"created_utc", createdUtc.empty() ? utcTimestamp() : createdUtc},
      {"hookscope_version", hookscopeVersion},
      {"steps", steps},
      {"hooked", hooks},
      {"interventions", interventionList},
      {"thinned", thinned()},
      {"thinning", thin},
      {"memory_cap_bytes", memoryCapBytes},
      {"interrupted", interrupted.empty() ? json(nullptr) : json(interrupted)},
  };
  j.update(configJson(config));  // the last configuration, also at the top level
  json history = json::array();
  for (const auto& record : configurations) {
    json entry = configJson(record.config);
    entry["from_step"] = record.fromStep;
    entry["to_step"] = record.toStep;
    history.push_back(std::move(entry));
  }
  j["configurations"] = history;
  if (script) {
    j["source"] = "script";
    j["script"] = scriptJson(*script);
  } else {
    j["source"] = "model";
  }
  json rankList = json::array();
  for (const auto& r : ranks) rankList.push_back(scriptJson(r));
  if (rankList.empty()) rankList.push_back({{"rank", 0}});
  j["ranks"] = rankList;
  j["world_size"] = ranks.empty() ? 1 : ranks.front().worldSize;
  json gapList = json::array();
  for (const auto& g : gaps) {
    json series = json::array();
    for (const auto& s : g.series) {
      series.push_back({{"series", s.key.module}, {"kind", captureKindName(s.key.kind)}, {"call", s.key.call},
                        {"index", s.key.index}, {"reason", s.reason}});
    }
    gapList.push_back({{"step", g.step}, {"rank", g.rank}, {"captures", g.captures}, {"bytes", g.bytes}, {"series", series}});
  }
  j["gaps"] = gapList;
  // Names from an attached script are its own: a bad UTF-8 byte is replaced, never fatal.
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

bool ExportManifest::fromJson(const std::string& text, ExportManifest* manifest,
                              std::string* error) {
  try {
    const json j = json::parse(text);
    if (j.value("format", "") != kFormat) {
      if (error) *error = "manifest.json is not a HookScope capture (format is not \"hookscope-capture\")";
      return false;
    }
    const int version = j.value("version", 0);
    if (version != 1 && version != kVersion) {
      if (error) *error = "manifest.json has version " + std::to_string(version) + "; this HookScope reads versions 1 to " +
                          std::to_string(kVersion) + (version > kVersion ? ": open it with a newer HookScope" : "");
      return false;
    }
    ExportManifest m;
    m.version = version;
    m.modelFile = j.at("model").value("file", "");
    m.modelSha256 = j.at("model").value("sha256", "");
    m.createdUtc = j.value("created_utc", "");
    m.hookscopeVersion = j.value("hookscope_version", "");
    m.config = configFromJson(j);
    for (const auto& c : j.value("configurations", json::array())) {
      m.configurations.push_back({c.value("from_step", std::int64_t(0)), c.value("to_step", std::int64_t(-1)), configFromJson(c)});
    }
    m.steps = j.value("steps", std::int64_t(0));
    for (const auto& h : j.value("hooked", json::array())) {
      m.hooked.push_back({h.value("module", ""), h.value("kinds", std::vector<std::string>{})});
    }
    for (const auto& i : j.value("interventions", json::array())) {
      m.interventions.push_back({i.value("module", ""), i.value("target", ""), i.value("action", ""),
                                 i.value("from_step", std::int64_t(0)), i.value("to_step", std::int64_t(0))});
    }
    for (const auto& t : j.value("thinning", json::array())) {
      m.thinning.push_back({t.value("at_step", std::int64_t(0)), t.value("steps_before", std::int64_t(0)),
                            t.value("steps_after", std::int64_t(0)), t.value("bytes_before", std::size_t(0)),
                            t.value("bytes_after", std::size_t(0)),
                            t.value("stride", std::int64_t(1)), t.value("call_stride", std::int64_t(1))});
    }
    m.memoryCapBytes = j.value("memory_cap_bytes", std::size_t(0));
    if (j.contains("interrupted") && j["interrupted"].is_string()) m.interrupted = j["interrupted"];
    if (j.value("source", "model") == "script" && j.contains("script") && j["script"].is_object()) {
      m.script = scriptFromJson(j["script"]);
    }
    for (const auto& r : j.value("ranks", json::array())) {
      if (r.is_object() && r.contains("name")) m.ranks.push_back(scriptFromJson(r));
    }
    for (const auto& g : j.value("gaps", json::array())) {
      GapRecord gap{g.value("step", std::int64_t(0)), g.value("captures", std::int64_t(0)),
                    g.value("bytes", std::int64_t(0)), g.value("rank", 0), {}};
      for (const auto& s : g.value("series", json::array())) {
        const auto kind = parseCaptureKind(s.value("kind", ""));
        if (!kind) continue;
        gap.series.push_back({SeriesKey{s.value("series", ""), s.value("call", 0), *kind, s.value("index", 0), gap.rank},
                              s.value("reason", "")});
      }
      m.gaps.push_back(std::move(gap));
    }
    *manifest = std::move(m);
    return true;
  } catch (const std::exception& e) {
    if (error) *error = std::string("manifest.json cannot be read: ") + e.what();
    return false;
  }
}

} // namespace hookscope
