#pragma once
// What an attached process reports, read off the wire: each step's statistics into the store
// (in the order they came, for the rules), then the step's end with its scalars, shapes,
// dropped captures and parameter prints. Each message is checked before the store sees it.

#include "files/ExportManifest.h"
#include "links/AttachedStep.h"
#include "links/ScriptHello.h"

#include <nlohmann/json_fwd.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hookscope {

class StepIntake {
public:
  /// For the process that said `hello` (its tree, parameters and rank), into `store`.
  StepIntake(const ScriptHello& hello, std::shared_ptr<CaptureStore> store);

  /// The clock of the first step starts: the process is being served from now.
  void begin() { m_lastStepEnd = std::chrono::steady_clock::now(); }
  /// A `stats` message of the step in progress; false with what is wrong.
  bool readStats(const nlohmann::json& message, std::string* error);
  /// A `series` message: the captures that binary stats rows name by number from now on.
  bool readSeries(const nlohmann::json& message, std::string* error);
  /// A binary stats frame of the step in progress (docs/protocol.md); false with what is wrong.
  bool readStatsRows(const std::string& payload, std::string* error);
  /// The `step` message that ends it: `done` and `gap` (the dropped captures it names) filled,
  /// its scalars stored. False with what is wrong.
  bool readStep(const nlohmann::json& message, AttachedStep* done, GapRecord* gap, std::string* error);
  /// The order the step's captures came in, for the rules.
  const StepOrder& order() const { return m_order; }
  /// Closes the step `done` ended (its time since the last one) and begins the next.
  void finishStep(AttachedStep* done);
  /// Steps ended so far.
  std::int64_t stepsDone() const { return m_step; }

private:
  /// The series a stats entry or a gap names: its module (by index into the hello's) or its
  /// parameter, call and index, and the process's rank.
  bool seriesKey(const nlohmann::json& message, CaptureKind kind, std::int64_t call, std::int64_t index,
                 const char* what, SeriesKey* key, std::string* error) const;
  /// A capture declared by a `series` message: what each of its rows is.
  struct Declared {
    SeriesKey key;
    std::vector<std::int64_t> shape;
    std::string dtype;
    std::int64_t numel = 0;
    bool sharded = false;
    ShardPart part;
  };
  /// A stats entry's or a declaration's key, shape, dtype, numel and whole.
  bool readCapture(const nlohmann::json& entry, Declared* out, std::string* error) const;
  /// Into the store (and the rules' order).
  void keep(std::int64_t step, const Declared& what, TensorStats stats);
  void readDropped(const nlohmann::json& dropped, AttachedStep* done, GapRecord* gap);
  void readPrints(const nlohmann::json& fingerprint, AttachedStep* done) const;
  void readShapes(const nlohmann::json& shapes, AttachedStep* done) const;
  void readReads(const nlohmann::json& reads, std::int64_t step);

  const ScriptHello& m_hello;
  std::shared_ptr<CaptureStore> m_store;
  std::int64_t m_step = 0;
  StepOrder m_order;
  int m_captures = 0;
  std::vector<Declared> m_declared;
  std::chrono::steady_clock::time_point m_lastStepEnd = std::chrono::steady_clock::now();
};

} // namespace hookscope
