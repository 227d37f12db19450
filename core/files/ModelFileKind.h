#pragma once
// What a model file is, told from its contents (never its name), without running any of it:
// which engine opens it, and what to say about one HookScope does not open.

#include <string>
#include <vector>

namespace hookscope {

enum class ModelFileKind {
  TorchScript,     ///< torch.jit.save: the C++ engine
  ExportedProgram, ///< torch.export.save (.pt2): the Python engine
  WholeModel,      ///< torch.save(model): a pickle of code; the Python engine, with trust
  Checkpoint,      ///< torch.save(state_dict) (weights only)
  SafeTensors,     ///< a .safetensors file
  Unknown
};

struct ModelFileInfo {
  ModelFileKind kind = ModelFileKind::Unknown;
  /// For WholeModel: the classes and functions its pickle names ("__main__.Net", ...).
  std::vector<std::string> globals;
  /// One line: what the file is, and for Unknown what HookScope opens instead.
  std::string description;
};

/// Reads the file's zip directory (and a torch.save pickle's opcodes, for the names it imports)
/// or a safetensors header; false with a message when it cannot be read at all.
bool identifyModelFile(const std::string& path, ModelFileInfo* info, std::string* error);

/// "TorchScript", "torch.export program (.pt2)", ...
const char* modelFileKindName(ModelFileKind kind);

/// The names a pickle imports (GLOBAL and STACK_GLOBAL), as "module.name", walking its opcodes
/// without running any; false when it holds an opcode this walker does not know, or ends early.
bool pickleGlobals(const std::string& pickle, std::vector<std::string>* globals);

} // namespace hookscope
