#pragma once
// The first message of an attached process (docs/protocol.md): who it is, its module tree, its
// rank in a job, its parameters, and, from an engine process, the model file it runs. Checked
// before anything else of the peer is believed.

#include "common/ModelTypes.h"
#include "files/ExportManifest.h"

#include <nlohmann/json_fwd.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hookscope {

/// What a HookScope engine process (`hookscope-cli serve`) says of itself in its hello: it runs
/// a model file, computes its statistics itself, and takes `configure`.
struct EngineHello {
  std::string model;         ///< the model file's path
  std::string exampleInput;  ///< the input spec stored in the model file, or ""
  std::string sha256;        ///< of the model file
  std::string confinement;   ///< what confines the engine process ("" if nothing)
};

/// A peer's hello, read and checked.
struct ScriptHello {
  ScriptRecord script;                    ///< name, pid, host, versions, rank, world size, job
  std::vector<ModuleInfo> modules;        ///< the tree, root first, parents before children
  std::map<std::string, int> moduleIndex; ///< dotted path -> index into modules
  std::vector<std::string> parameters;    ///< named_parameters() order (jobs of several ranks)
  std::optional<EngineHello> engine;      ///< set when the peer is an engine process

  /// Reads `hello` (a parsed JSON object; over TCP its sender proved the token first, WireAuth.h).
  /// False with what is wrong: another protocol version, a tree out of order, a bad rank.
  static bool read(const nlohmann::json& hello, ScriptHello* out, std::string* error);
};

} // namespace hookscope
