#include "links/StepIntake.h"

#include "wire/WireJson.h"
#include "wire/WireStats.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace hookscope {

using nlohmann::json;

namespace {

constexpr std::size_t kMaxNamedGaps = 64;
constexpr std::int64_t kMaxStep = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMaxParts = 1 << 20;
constexpr std::int64_t kMaxDeclared = 1 << 22;  // series one script may declare

// A stats entry's `whole`: which part of a sharded tensor the entry's row is (docs/protocol.md).
bool shardPartFrom(const json& whole, std::int64_t numel, ShardPart* part, std::string* error) {
  bool ok = whole.is_object();
  const auto parts = ok ? wireInt(whole, "parts", 1, kMaxParts, &ok) : 0;
  const auto index = ok ? wireInt(whole, "part", 0, parts - 1, &ok) : 0;
  std::int64_t wholeNumel = 0;
  if (!ok || !shapeFromWire(whole, "a sharded tensor's whole", &part->shape, &wholeNumel, error) ||
      wholeNumel < numel) {
    *error = "a stats entry's whole (part, parts, shape) is damaged or smaller than its shard";
    return false;
  }
  part->part = int(index);
  part->parts = int(parts);
  return true;
}

} // namespace

StepIntake::StepIntake(const ScriptHello& hello, std::shared_ptr<CaptureStore> store)
    : m_hello(hello), m_store(std::move(store)) {}

bool StepIntake::seriesKey(const json& message, CaptureKind kind, std::int64_t call, std::int64_t index,
                           const char* what, SeriesKey* key, std::string* error) const {
  key->call = int(call);
  key->kind = kind;
  key->index = int(index);
  key->rank = m_hello.script.rank;
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
  const auto module = wireInt(message, "module", 0, std::int64_t(m_hello.modules.size()) - 1, &ok);
  if (!ok) {
    *error = std::string(what) + " names no module of the hello";
    return false;
  }
  key->module = m_hello.modules[std::size_t(module)].path;
  return true;
}

bool StepIntake::readCapture(const json& entry, Declared* out, std::string* error) const {
  if (!entry.is_object()) {
    *error = "a stats entry is not an object";
    return false;
  }
  bool ok = true;
  const auto call = wireInt(entry, "call", 0, std::numeric_limits<int>::max(), &ok);
  const auto index = wireInt(entry, "index", 0, std::numeric_limits<int>::max(), &ok);
  const auto kind = parseCaptureKind(wireString(entry, "kind"));
  if (!ok || !kind) {
    *error = "a stats entry lacks call, index or kind, or has one out of range";
    return false;
  }
  if (!seriesKey(entry, *kind, call, index, "a stats entry", &out->key, error)) return false;
  if (!shapeFromWire(entry, "a stats entry", &out->shape, &out->numel, error)) return false;
  const auto dtype = entry.find("dtype");
  if (dtype == entry.end() || !dtype->is_string() || dtype->get_ref<const std::string&>().size() > 32) {
    *error = "a stats entry has no dtype";
    return false;
  }
  out->dtype = dtype->get<std::string>();
  if (wireInt(entry, "numel", 0, std::numeric_limits<std::int64_t>::max(), &ok) != out->numel || !ok) {
    *error = "a stats entry's numel does not match its shape";
    return false;
  }
  const auto whole = entry.find("whole");
  out->sharded = whole != entry.end();
  return !out->sharded || shardPartFrom(*whole, out->numel, &out->part, error);
}

void StepIntake::keep(std::int64_t step, const Declared& what, TensorStats stats) {
  if (what.key.kind == CaptureKind::Activation) m_order.forward.push_back(what.key);
  if (what.key.kind == CaptureKind::Gradient) m_order.backward.push_back(what.key);
  if (what.sharded) {
    m_store->addShard(step, what.key, std::move(stats), what.part);
  } else {
    m_store->add(step, what.key, std::move(stats));
  }
  ++m_captures;
}

// Statistics a script or an engine computed in its own process, where the tensors live.
bool StepIntake::readStats(const json& message, std::string* error) {
  bool ok = true;
  const auto step = wireInt(message, "step", 0, kMaxStep, &ok);
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
    Declared what;
    TensorStats stats;
    if (!readCapture(entry, &what, error) || !statsFromWire(entry, &stats, error)) return false;
    keep(step, what, std::move(stats));
  }
  return true;
}

bool StepIntake::readSeries(const json& message, std::string* error) {
  const auto list = message.find("series");
  if (list == message.end() || !list->is_array()) {
    *error = "a series message has no series";
    return false;
  }
  for (const auto& entry : *list) {
    bool ok = true;
    const auto id = wireInt(entry, "id", 0, kMaxDeclared - 1, &ok);
    if (!ok || id != std::int64_t(m_declared.size())) {
      *error = "a series message's ids do not count up from the last one declared (or pass " +
               std::to_string(kMaxDeclared) + ")";
      return false;
    }
    Declared what;
    if (!readCapture(entry, &what, error)) return false;
    m_declared.push_back(std::move(what));
  }
  return true;
}

// [step u64][rows u32][bins u32], then per row [series id u32][0 u32][kRowHeader + bins float64],
// little-endian (docs/protocol.md).
bool StepIntake::readStatsRows(const std::string& payload, std::string* error) {
  auto u32 = [&](std::size_t at) {
    std::uint32_t v = 0;
    std::memcpy(&v, payload.data() + at, 4);
    return v;
  };
  if (payload.size() < 16) {
    *error = "a stats frame is shorter than its header";
    return false;
  }
  std::uint64_t step = 0;
  std::memcpy(&step, payload.data(), 8);
  const std::uint64_t rows = u32(8), bins = u32(12);
  if (step != std::uint64_t(m_step)) {
    *error = "statistics of step " + std::to_string(step) + " came during step " + std::to_string(m_step);
    return false;
  }
  const std::uint64_t rowBytes = 8 + 8 * (kRowHeader + bins);
  if (bins > kMaxWireBins || payload.size() != 16 + rows * rowBytes) {
    *error = "a stats frame's length does not match its " + std::to_string(rows) + " rows of " + std::to_string(bins) +
             " bins";
    return false;
  }
  std::vector<double> row(kRowHeader + bins);
  for (std::uint64_t r = 0; r < rows; ++r) {
    const std::size_t at = 16 + r * rowBytes;
    const std::uint32_t id = u32(at);
    if (id >= m_declared.size()) {
      *error = "a stats row names series " + std::to_string(id) + ", which was never declared";
      return false;
    }
    std::memcpy(row.data(), payload.data() + at + 8, row.size() * 8);
    const Declared& what = m_declared[id];
    TensorStats stats;
    stats.shape = what.shape;
    stats.dtype = what.dtype;
    stats.numel = what.numel;
    if (!statsFromRow(row.data(), bins, &stats, error)) return false;
    keep(std::int64_t(step), what, std::move(stats));
  }
  return true;
}

bool StepIntake::readStep(const json& message, AttachedStep* done, GapRecord* gap, std::string* error) {
  bool ok = true;
  const auto step = wireInt(message, "step", 0, kMaxStep, &ok);
  if (!ok || step != m_step) {
    *error = "step " + std::to_string(step) + " ended, but step " + std::to_string(m_step) + " was running";
    return false;
  }
  const int rank = m_hello.script.rank;
  done->step = step;
  done->captures = m_captures;
  if (const auto it = message.find("scalars"); it != message.end() && it->is_object()) {
    for (const auto& [name, value] : it->items()) {
      double number = 0;
      if (name.empty() || name.size() > 256 || !wireNumberFrom(value, &number)) continue;
      done->scalars[name] = number;
      m_store->addScalar(step, name, number, rank);
    }
  }
  *gap = GapRecord{step, 0, 0, rank, {}};
  if (const auto it = message.find("dropped"); it != message.end() && it->is_object()) readDropped(*it, done, gap);
  if (const auto it = message.find("fingerprint"); it != message.end() && it->is_object()) readPrints(*it, done);
  if (const auto it = message.find("shapes"); it != message.end() && it->is_object()) readShapes(*it, done);
  if (const auto it = message.find("reads"); it != message.end() && it->is_object()) readReads(*it, step);
  return true;
}

// How the step's captures were read on a GPU (docs/protocol.md): scalars reads_one, reads_two
// and reads_shared (a capture of a tensor already read this step, its row copied).
void StepIntake::readReads(const json& reads, std::int64_t step) {
  for (const char* name : {"one", "two", "shared"}) {
    bool ok = true;
    const auto count = wireInt(reads, name, 0, kMaxStep, &ok);
    if (ok && reads.contains(name)) m_store->addScalar(step, std::string("reads_") + name, double(count), m_hello.script.rank);
  }
}

void StepIntake::readDropped(const json& dropped, AttachedStep* done, GapRecord* gap) {
  bool counted = true;
  done->droppedCaptures = wireInt(dropped, "captures", 0, kMaxStep, &counted);
  if (!counted) done->droppedCaptures = 0;
  if (dropped.contains("bytes")) done->droppedBytes = wireInt(dropped, "bytes", 0, kMaxStep, &counted);
  if (!counted) done->droppedBytes = 0;
  if (done->droppedCaptures > 0) {
    m_store->addScalar(done->step, "dropped_captures", double(done->droppedCaptures), m_hello.script.rank);
  }
  // Which series lost this step, and why (the script names up to 64 of them).
  const auto list = dropped.find("series");
  if (list == dropped.end() || !list->is_array()) return;
  for (const auto& entry : *list) {
    if (gap->series.size() >= kMaxNamedGaps || !entry.is_object()) break;
    bool fine = true;
    const auto call = wireInt(entry, "call", 0, std::numeric_limits<int>::max(), &fine);
    const auto index = wireInt(entry, "index", 0, std::numeric_limits<int>::max(), &fine);
    const auto kind = parseCaptureKind(wireString(entry, "kind"));
    SeriesKey key;
    std::string ignored;
    if (!fine || !kind || !seriesKey(entry, *kind, call, index, "a gap", &key, &ignored)) continue;
    gap->series.push_back({key, wireString(entry, "reason")});
  }
  if (!gap->series.empty()) done->dropReason = gap->series.front().reason;
}

// Per parameter [sum, norm] of its values and of its gradient (null: no gradient).
void StepIntake::readPrints(const json& fingerprint, AttachedStep* done) const {
  auto prints = [&](const char* field, std::vector<std::array<double, 2>>* out) {
    const auto list = fingerprint.find(field);
    if (list == fingerprint.end() || !list->is_array() || list->size() != m_hello.parameters.size()) return;
    for (const auto& pair : *list) {
      std::array<double, 2> v{std::nan(""), std::nan("")};
      if (pair.is_array() && pair.size() == 2) {
        wireNumberFrom(pair[0], &v[0]);
        wireNumberFrom(pair[1], &v[1]);
      }
      out->push_back(v);
    }
  };
  prints("params", &done->parameterPrints);
  prints("grads", &done->gradientPrints);
}

void StepIntake::readShapes(const json& shapes, AttachedStep* done) const {
  const auto& modules = m_hello.modules;
  for (const auto& [module, calls] : shapes.items()) {
    const auto index = std::strtoll(module.c_str(), nullptr, 10);
    if (index < 0 || index >= std::int64_t(modules.size()) || !calls.is_array()) continue;
    int call = 0;
    for (const auto& tensors : calls) {  // per call, the shape of each tensor of the output
      ModuleCallShape shape{modules[std::size_t(index)].path, call++, {}};
      if (tensors.is_array()) {
        for (const auto& text : tensors) {
          if (text.is_string()) shape.shapes.push_back(text.get<std::string>());
        }
      }
      done->shapes.push_back(std::move(shape));
    }
  }
}

void StepIntake::finishStep(AttachedStep* done) {
  const auto now = std::chrono::steady_clock::now();
  done->seconds = std::chrono::duration<double>(now - m_lastStepEnd).count();
  m_lastStepEnd = now;
  m_step = done->step + 1;
  m_order = StepOrder{};
  m_captures = 0;
}

} // namespace hookscope
