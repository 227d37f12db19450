#pragma once

#include "store/CaptureStore.h"
#include "common/ModelTypes.h"
#include "common/RunConfig.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hookscope {

/// A module and the kinds hooked on it, as listed in the manifest.
struct HookedModule {
  std::string module;
  std::vector<std::string> kinds;
};

/// One module of the model, hooked or not, as the tree shows it.
struct ModuleRecord {
  std::string path;  ///< dotted; "" for the root
  std::string type;  ///< short class name ("Conv2d")
  std::int64_t ownParams = 0;
  std::int64_t totalParams = 0;
  std::vector<std::string> shapes;  ///< per call, its output shapes ("8x16x14x14", "2x4, 2x4")
};

/// An intervention in force over a range of steps.
struct InterventionRecord {
  std::string module;
  std::string target;  ///< "gradient" (at the module's output) or "output"
  std::string action;  ///< "clamp 0.01", "scale 0.5", "zero", "mean"
  std::int64_t fromStep = 0;
  std::int64_t toStep = 0;
};

/// A run configuration in force over a range of steps.
struct ConfigRecord {
  std::int64_t fromStep = 0;
  std::int64_t toStep = -1;  ///< -1: still in force
  RunConfig config;
};

/// Records that `config` is in force from `step` on: closes the open record (until the step
/// before) unless it holds the same configuration. A record closed before any step of its own
/// is dropped.
void logConfig(std::vector<ConfigRecord>* log, const RunConfig& config, std::int64_t step);

/// Records a change of `module`'s intervention on `target` made before step `step`: closes its
/// open record (in force until the step before) and, for a non-empty `action`, opens one from
/// `step` (toStep -1: still in force). A record closed before any step of its own is dropped.
void logIntervention(std::vector<InterventionRecord>* log, const std::string& module, const std::string& target,
                     const std::string& action, std::int64_t step);

/// A run configuration as JSON text, the form the manifest and the engine's `configure` use.
std::string runConfigText(const RunConfig& config);
/// Parses runConfigText's form; false with a message when it is not one.
bool parseRunConfig(const std::string& text, RunConfig* config, std::string* error);

/// The training script an attached session came from.
struct ScriptRecord {
  std::string name;    ///< the script's name (its file, or attach(name=...))
  std::int64_t pid = 0;
  std::string host;
  std::string python;  ///< Python version
  std::string torch;   ///< PyTorch version
  std::string device;  ///< where the model's parameters were ("cpu", "cuda:0")
  std::string dtype;   ///< and their dtype
  std::string optimizer;  ///< the optimizer class given to attach(), or ""
  std::string ended;   ///< how the session ended ("closed by the script", "disconnected: ...")
  int rank = 0;        ///< its rank in a torch.distributed job (0 alone)
  int worldSize = 1;   ///< the job's world size (1 alone)
  std::string job;     ///< the job it belongs to (MASTER_ADDR:MASTER_PORT or attach(job=...)), "" alone
  std::int64_t steps = 0;  ///< steps it finished

  /// "train.py (pid 4242 on host, PyTorch 2.13.0, cpu float32, SGD)".
  std::string describe() const;
};

/// A series that lost a step's capture, and why.
struct GapSeries {
  SeriesKey key;
  std::string reason;  ///< "the viewer was 20 MiB behind", the error its statistics raised, ...
};

/// Captures of a step that a script could not keep: its statistics failed, or the viewer was
/// too far behind to be sent more.
struct GapRecord {
  std::int64_t step = 0;
  std::int64_t captures = 0;
  std::int64_t bytes = 0;        ///< protocol 1 scripts said how many tensor bytes; 0 since
  int rank = 0;
  std::vector<GapSeries> series;  ///< the series named (the script names at most 64 a step)
};

/// Everything manifest.json holds: what was run, on what, and what was kept.
struct ExportManifest {
  static constexpr const char* kFormat = "hookscope-capture";
  /// Version 2 added ranks: a rank column in stats.csv, scalars.csv and alerts.csv, "rank{r}/"
  /// before histograms.pt keys, and `ranks` here. Version 1 exports are still read.
  static constexpr int kVersion = 3;

  int version = kVersion;   ///< the version read back (1 to 3); always kVersion when written
  std::string modelFile;    ///< file name
  std::string modelSha256;
  std::string createdUtc;   ///< ISO 8601, set by the writer when empty
  std::string hookscopeVersion;
  RunConfig config;
  std::int64_t steps = 0;
  std::vector<HookedModule> hooked;
  /// The whole model (every module, hooked or not), for a reopened run's tree; empty in exports
  /// written before it was kept (the tree is then built from the series).
  std::vector<ModuleRecord> modules;
  std::vector<InterventionRecord> interventions;
  /// Every configuration the run used, with its steps; `config` is the last one.
  std::vector<ConfigRecord> configurations;
  std::vector<ThinningEvent> thinning;
  std::size_t memoryCapBytes = 0;
  /// The signal that ended the run before its last step ("SIGINT", "SIGTERM"); "" when it ran to its end.
  std::string interrupted;
  /// Set when the captures came from an attached training script, not a model file.
  std::optional<ScriptRecord> script;
  /// Every process of an attached torch.distributed job, by rank (empty for one process).
  std::vector<ScriptRecord> ranks;
  std::vector<GapRecord> gaps;
  /// The data rows (header not counted) each CSV was written with ("stats.csv", "scalars.csv"),
  /// so that a reader tells a cut file from a smaller run; empty in exports written before.
  std::map<std::string, std::int64_t> rows;

  bool thinned() const { return !thinning.empty(); }
  /// The model's module paths in its order (`modules`), else, for an export written before it
  /// kept them, the hooked ones: the forward order a comparison of runs follows.
  std::vector<std::string> modulePaths() const;
  /// Captures the script reported dropped, over every step of every rank.
  std::int64_t droppedCaptures() const;
  /// The manifest as JSON text.
  std::string toJson() const;
  /// Parses manifest.json text; false with a message when it is not a HookScope manifest.
  static bool fromJson(const std::string& text, ExportManifest* manifest, std::string* error);
};

/// The model's modules for a manifest: the tree's, with each module's output shapes by call
/// (`shapes`: module path -> per call, its output shapes joined by ", ").
std::vector<ModuleRecord> moduleRecords(const std::vector<ModuleInfo>& modules,
                                        const std::map<std::string, std::vector<std::string>>& shapes);
/// The same shapes from a step's ModuleCallShape list.
std::map<std::string, std::vector<std::string>> shapesByModule(const std::vector<ModuleCallShape>& calls);

/// Current time as "2026-11-21T16:20:00Z".
std::string utcTimestamp();

} // namespace hookscope
