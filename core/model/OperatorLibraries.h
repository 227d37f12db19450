#pragma once

#include <string>
#include <vector>

namespace hookscope {

/// One shared library of custom operators (torchvision's, a user's TORCH_LIBRARY build).
struct OperatorLibrary {
  std::string path;
  bool loaded = false;
  std::string error;  ///< why it could not be loaded; "" when it was
  std::vector<std::string> namespaces;  ///< operator namespaces it registered ("torchvision")
};

/// Loads a library of TorchScript operators into this process (like torch.ops.load_library),
/// once per path; returns false and sets `error` to a message naming the file and the reason.
bool loadOperatorLibrary(const std::string& path, std::string* error);

/// Loads the operator libraries of the PyTorch installation this build links (torchvision's,
/// when one is installed beside it), once; a library that fails to load is noted, not fatal.
const std::vector<OperatorLibrary>& loadBundledOperatorLibraries();

/// Every library loaded or tried so far, in order.
std::vector<OperatorLibrary> operatorLibraries();

/// The PyTorch version whose LibTorch this build links, e.g. "2.13.0".
std::string linkedTorchVersion();

/// For a load error naming an unknown operator ("Unknown builtin op: torchvision::nms"):
/// a sentence naming the operator, the library that provides it and how to load it; "" when
/// the error is about something else.
std::string explainMissingOperator(const std::string& torchError);

} // namespace hookscope
