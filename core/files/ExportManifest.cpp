#include "files/ExportManifest.h"
#include "common/FileLimits.h"

#include "common/CheckedMath.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <stdexcept>
#include <limits>
#include <cmath>
#include <ctime>

namespace hookscope {

using nlohmann::json;

namespace {

// A whole-number field, checked: a number that is fractional, not finite or outside [low, high]
// (nlohmann's own conversion of 1e300 to an integer is undefined behaviour), or not a number at
// all, is refused with the field's name. Absent or null: the fallback.
template <typename T>
T wholeNumber(const json& j, const char* key, T fallback, T low = std::numeric_limits<T>::lowest(),
              T high = std::numeric_limits<T>::max()) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  long double v = 0;  // exact for every 64-bit integer
  bool whole = true;
  if (it->is_number_unsigned()) {
    v = static_cast<long double>(it->get<std::uint64_t>());
  } else if (it->is_number_integer()) {
    v = static_cast<long double>(it->get<std::int64_t>());
  } else if (it->is_number_float()) {
    const double d = it->get<double>();
    whole = std::isfinite(d) && d == std::floor(d);
    v = d;
  } else {
    whole = false;
  }
  if (!whole || v < static_cast<long double>(low) || v > static_cast<long double>(high)) {
    throw std::runtime_error("\"" + std::string(key) + "\" is " + it->dump() + ", not a whole number from " +
                             std::to_string(low) + " to " + std::to_string(high));
  }
  return static_cast<T>(v);
}

// A real-number field: a JSON number, or the fallback when absent; anything else names the field.
double realNumber(const json& j, const char* key, double fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) throw std::runtime_error("\"" + std::string(key) + "\" is " + it->dump() + ", not a number");
  return it->get<double>();
}

} // namespace



std::string ScriptRecord::describe() const {
  return name + " (pid " + std::to_string(pid) + " on " + host + ", PyTorch " + torch + ", " + device + " " + dtype +
         (optimizer.empty() ? "" : ", " + optimizer) + ")";
}

std::int64_t ExportManifest::droppedCaptures() const {
  std::int64_t dropped = 0;
  for (const auto& gap : gaps) dropped = saturatingAdd(dropped, gap.captures);  // counts from a file
  return dropped;
}

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
  r.pid = wholeNumber<std::int64_t>(s, "pid", 0, 0);
  r.host = s.value("host", "");
  r.python = s.value("python", "");
  r.torch = s.value("torch", "");
  r.device = s.value("device", "");
  r.dtype = s.value("dtype", "");
  r.optimizer = s.value("optimizer", "");
  r.ended = s.value("ended", "");
  r.rank = wholeNumber<int>(s, "rank", 0, 0);
  r.worldSize = wholeNumber<int>(s, "world_size", 1, 1);
  r.job = s.value("job", "");
  r.steps = wholeNumber<std::int64_t>(s, "steps", 0, 0);
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
  c.batchSize = wholeNumber<std::int64_t>(j, "batch_size", 0, 0);
  c.loss = parseLossKind(j.value("loss", "auto")).value_or(LossKind::Auto);
  c.optimizer = parseOptimizerKind(j.value("optimizer", "none")).value_or(OptimizerKind::None);
  c.lr = realNumber(j, "lr", 0.0);
  c.momentum = realNumber(j, "momentum", 0.0);
  c.weightDecay = realNumber(j, "weight_decay", 0.0);
  c.train = j.value("train", true);
  c.noGrad = j.value("no_grad", false);
  c.seed = wholeNumber<std::uint64_t>(j, "seed", 0);
  c.bins = wholeNumber<int>(j, "bins", 64, 1, 4096);
  return c;
}

std::string runConfigText(const RunConfig& config) { return configJson(config).dump(); }

bool parseRunConfig(const std::string& text, RunConfig* config, std::string* error) {
  try {
    if (const std::string deep = checkJsonDepth(text); !deep.empty()) throw std::runtime_error(deep);
    const json j = json::parse(text);
    if (!j.is_object()) throw std::runtime_error("not a JSON object");
    *config = configFromJson(j);
    return true;
  } catch (const std::exception& e) {
    *error = std::string("a run configuration is malformed: ") + e.what();
    return false;
  }
}

std::vector<std::string> ExportManifest::modulePaths() const {
  std::vector<std::string> paths;
  for (const auto& m : modules) paths.push_back(m.path);
  if (paths.empty()) {
    for (const auto& h : hooked) paths.push_back(h.module);
  }
  return paths;
}

std::vector<ModuleRecord> moduleRecords(const std::vector<ModuleInfo>& modules,
                                        const std::map<std::string, std::vector<std::string>>& shapes) {
  std::vector<ModuleRecord> records;
  for (const auto& info : modules) {
    const auto found = shapes.find(info.path);
    records.push_back({info.path, info.typeName, info.ownParams, info.totalParams,
                       found == shapes.end() ? std::vector<std::string>{} : found->second});
  }
  return records;
}

std::map<std::string, std::vector<std::string>> shapesByModule(const std::vector<ModuleCallShape>& calls) {
  std::map<std::string, std::vector<std::string>> shapes;
  for (const auto& call : calls) {
    auto& perCall = shapes[call.module];
    if (perCall.size() <= std::size_t(call.call)) perCall.resize(std::size_t(call.call) + 1);
    std::string text;
    for (const auto& s : call.shapes) text += (text.empty() ? "" : ", ") + s;
    perCall[std::size_t(call.call)] = text;
  }
  return shapes;
}

std::string ExportManifest::toJson() const {
  json hooks = json::array();
  for (const auto& h : hooked) hooks.push_back({{"module", h.module}, {"kinds", h.kinds}});
  json moduleList = json::array();
  for (const auto& m : modules) {
    moduleList.push_back({{"path", m.path}, {"type", m.type}, {"params", m.ownParams}, {"total", m.totalParams},
                          {"shapes", m.shapes}});
  }
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
      {"modules", moduleList},
      {"interventions", interventionList},
      {"thinned", thinned()},
      {"thinning", thin},
      {"memory_cap_bytes", memoryCapBytes},
      {"interrupted", interrupted.empty() ? json(nullptr) : json(interrupted)},
  };
  if (!rows.empty()) j["rows"] = rows;
  if (script) {
    // An attached script ran its own loop: its data, loss and optimizer (named in `script`) are
    // its own, and the window's run settings did not apply. Only the histogram bins did.
    j["bins"] = config.bins;
  } else {
    j.update(configJson(config));  // the last configuration, also at the top level
  }
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
    if (const std::string deep = checkJsonDepth(text); !deep.empty()) {
      if (error) *error = "manifest.json " + deep;
      return false;
    }
    const json j = json::parse(text);
    if (j.value("format", "") != kFormat) {
      if (error) *error = "manifest.json is not a HookScope capture (format is not \"hookscope-capture\")";
      return false;
    }
    const int version = wholeNumber<int>(j, "version", 0);
    if (version < 1 || version > kVersion) {
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
      m.configurations.push_back({wholeNumber<std::int64_t>(c, "from_step", 0, 0), wholeNumber<std::int64_t>(c, "to_step", -1, -1), configFromJson(c)});
    }
    m.steps = wholeNumber<std::int64_t>(j, "steps", 0, 0);
    for (const auto& h : j.value("hooked", json::array())) {
      m.hooked.push_back({h.value("module", ""), h.value("kinds", std::vector<std::string>{})});
    }
    for (const auto& r : j.value("modules", json::array())) {
      m.modules.push_back({r.value("path", ""), r.value("type", ""), wholeNumber<std::int64_t>(r, "params", 0, 0),
                           wholeNumber<std::int64_t>(r, "total", 0, 0), r.value("shapes", std::vector<std::string>{})});
    }
    for (const auto& i : j.value("interventions", json::array())) {
      m.interventions.push_back({i.value("module", ""), i.value("target", ""), i.value("action", ""),
                                 wholeNumber<std::int64_t>(i, "from_step", 0, 0), wholeNumber<std::int64_t>(i, "to_step", 0, -1)});
    }
    for (const auto& t : j.value("thinning", json::array())) {
      m.thinning.push_back({wholeNumber<std::int64_t>(t, "at_step", 0, 0), wholeNumber<std::int64_t>(t, "steps_before", 0, 0),
                            wholeNumber<std::int64_t>(t, "steps_after", 0, 0), wholeNumber<std::size_t>(t, "bytes_before", 0),
                            wholeNumber<std::size_t>(t, "bytes_after", 0),
                            wholeNumber<std::int64_t>(t, "stride", 1, 1), wholeNumber<std::int64_t>(t, "call_stride", 1, 1)});
    }
    m.memoryCapBytes = wholeNumber<std::size_t>(j, "memory_cap_bytes", 0);
    if (j.contains("interrupted") && j["interrupted"].is_string()) m.interrupted = j["interrupted"];
    if (j.contains("rows") && j["rows"].is_object()) {
      for (const auto& [file, count] : j["rows"].items()) {
        if (count.is_null()) throw std::runtime_error("\"" + file + "\" is null, not a count of rows");
        m.rows[file] = wholeNumber<std::int64_t>(j["rows"], file.c_str(), 0, 0);
      }
    }
    if (j.value("source", "model") == "script" && j.contains("script") && j["script"].is_object()) {
      m.script = scriptFromJson(j["script"]);
    }
    for (const auto& r : j.value("ranks", json::array())) {
      if (r.is_object() && r.contains("name")) m.ranks.push_back(scriptFromJson(r));
    }
    for (const auto& g : j.value("gaps", json::array())) {
      GapRecord gap{wholeNumber<std::int64_t>(g, "step", 0, 0), wholeNumber<std::int64_t>(g, "captures", 0, 0),
                    wholeNumber<std::int64_t>(g, "bytes", 0, 0), wholeNumber<int>(g, "rank", 0, 0), {}};
      for (const auto& s : g.value("series", json::array())) {
        const auto kind = parseCaptureKind(s.value("kind", ""));
        if (!kind) continue;
        gap.series.push_back({SeriesKey{s.value("series", ""), wholeNumber<int>(s, "call", 0, 0), *kind, wholeNumber<int>(s, "index", 0, 0), gap.rank},
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
