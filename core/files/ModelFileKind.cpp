#include "files/ModelFileKind.h"

#include <zip.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>

namespace hookscope {

const char* modelFileKindName(ModelFileKind kind) {
  switch (kind) {
    case ModelFileKind::TorchScript: return "TorchScript";
    case ModelFileKind::ExportedProgram: return "torch.export program (.pt2)";
    case ModelFileKind::WholeModel: return "whole-model pickle (torch.save(model))";
    case ModelFileKind::Checkpoint: return "checkpoint (a state_dict saved with torch.save)";
    case ModelFileKind::SafeTensors: return "safetensors file";
    case ModelFileKind::Unknown: break;
  }
  return "unknown";
}

namespace {

bool readU(const std::string& p, std::size_t& at, std::size_t n, std::uint64_t* value) {
  if (at + n > p.size()) return false;
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v |= std::uint64_t(std::uint8_t(p[at + i])) << (8 * i);
  at += n;
  *value = v;
  return true;
}

bool skip(const std::string& p, std::size_t& at, std::uint64_t n) {
  if (n > p.size() - at) return false;
  at += std::size_t(n);
  return true;
}

bool line(const std::string& p, std::size_t& at, std::string* text) {
  const auto end = p.find('\n', at);
  if (end == std::string::npos) return false;
  *text = p.substr(at, end - at);
  at = end + 1;
  return true;
}

/// Everything a weights_only torch.load accepts in a state_dict: containers, tensors rebuilt from
/// storages, dtypes and devices. Anything else is code that runs when the pickle is loaded.
bool weightsOnlyGlobal(const std::string& name) {
  static const std::set<std::string> allowed = {
      "collections.OrderedDict", "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_parameter",
      "torch._utils._rebuild_parameter_with_state", "torch._tensor._rebuild_from_type_v2", "torch.device",
      "torch.Size", "_codecs.encode", "builtins.set", "__builtin__.set", "builtins.frozenset", "builtins.slice", "builtins.complex",
      "torch.serialization._get_layout", "torch._utils._rebuild_qtensor", "torch._utils._rebuild_sparse_tensor",
      "torch.nn.parameter.Parameter"};
  if (allowed.count(name)) return true;
  // torch.FloatStorage ..., torch.float32, torch.bfloat16, ... (storages and dtypes)
  if (name.rfind("torch.", 0) == 0 && name.find('.', 6) == std::string::npos) return true;
  return false;
}

}  // namespace

bool pickleGlobals(const std::string& p, std::vector<std::string>* globals) {
  std::vector<std::string> strings;  // the last strings pushed, for STACK_GLOBAL
  std::size_t at = 0;
  std::uint64_t n = 0;
  while (at < p.size()) {
    const auto op = std::uint8_t(p[at++]);
    switch (op) {
      case 0x80: if (!skip(p, at, 1)) return false; break;             // PROTO
      case 0x95: if (!skip(p, at, 8)) return false; break;             // FRAME
      case '.': return true;                                           // STOP
      case 'c': {                                                      // GLOBAL
        std::string module, name;
        if (!line(p, at, &module) || !line(p, at, &name)) return false;
        globals->push_back(module + "." + name);
        break;
      }
      case 0x93:                                                       // STACK_GLOBAL
        if (strings.size() < 2) return false;
        globals->push_back(strings[strings.size() - 2] + "." + strings.back());
        break;
      case 0x8c:                                                       // SHORT_BINUNICODE
        if (!readU(p, at, 1, &n) || n > p.size() - at) return false;
        strings.push_back(p.substr(at, n));
        at += n;
        break;
      case 'X':                                                        // BINUNICODE
        if (!readU(p, at, 4, &n) || n > p.size() - at) return false;
        strings.push_back(p.substr(at, n));
        at += n;
        break;
      case 0x8d:                                                       // BINUNICODE8
        if (!readU(p, at, 8, &n) || !skip(p, at, n)) return false;
        break;
      case 'U': case 'C':                                              // SHORT_BINSTRING, SHORT_BINBYTES
        if (!readU(p, at, 1, &n) || !skip(p, at, n)) return false;
        break;
      case 'T': case 'B':                                              // BINSTRING, BINBYTES
        if (!readU(p, at, 4, &n) || !skip(p, at, n)) return false;
        break;
      case 0x8e: case 0x96:                                            // BINBYTES8, BYTEARRAY8
        if (!readU(p, at, 8, &n) || !skip(p, at, n)) return false;
        break;
      case 'K': case 'q': case 'h': if (!skip(p, at, 1)) return false; break;  // BININT1, BINPUT, BINGET
      case 'M': if (!skip(p, at, 2)) return false; break;                      // BININT2
      case 'J': case 'r': case 'j': if (!skip(p, at, 4)) return false; break;  // BININT, LONG_BINPUT, LONG_BINGET
      case 'G': if (!skip(p, at, 8)) return false; break;                      // BINFLOAT
      case 0x8a: if (!readU(p, at, 1, &n) || !skip(p, at, n)) return false; break;  // LONG1
      case 0x8b: if (!readU(p, at, 4, &n) || !skip(p, at, n)) return false; break;  // LONG4
      case 'Q':                                                                // BINPERSID
      case '}': case ']': case ')': case '(': case 't': case 0x85: case 0x86: case 0x87:
      case 'N': case 0x88: case 0x89: case 'a': case 'e': case 's': case 'u': case 'R':
      case 'b': case 'o': case 0x81: case 0x92: case 0x94: case '0': case '2': case '1':
      case 0x8f: case 0x90: case 0x91: case 0x97: case 0x98:
        break;  // no argument
      case 'I': case 'L': case 'F': case 'S': case 'V': case 'P': case 'g': case 'p': {
        std::string ignored;  // text opcodes (protocol 0): the argument runs to a newline
        if (!line(p, at, &ignored)) return false;
        break;
      }
      default: return false;
    }
    // STACK_GLOBAL takes the two strings pushed just before it (MEMOIZE and PUT between them
    // keep them); after anything else, what it would take is not known here, and the walk fails.
    const bool keepsStrings = op == 0x8c || op == 'X' || op == 0x94 || op == 'q' || op == 'r';
    if (!keepsStrings) strings.clear();
  }
  return false;  // no STOP
}

namespace {

// A safetensors file: an 8-byte little-endian header length, then its JSON header.
bool isSafeTensors(std::ifstream& in) {
  char head[8] = {};
  in.read(head, 8);
  if (in.gcount() != 8 || (head[0] == 'P' && head[1] == 'K')) return false;
  std::uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= std::uint64_t(std::uint8_t(head[i])) << (8 * i);
  char first = 0;
  in.get(first);
  return in && first == '{' && length > 1 && length < (std::uint64_t(100) << 20);
}

// A torch.save pickle: a whole model when it names anything beyond weights, else a checkpoint.
bool identifyPickle(zip_t* z, zip_int64_t pickle, std::uint64_t pickleSize, const std::string& path,
                    ModelFileInfo* info, std::string* error) {
  if (pickleSize > (std::uint64_t(256) << 20)) {
    *error = path + ": its pickle claims " + std::to_string(pickleSize) + " bytes, more than a model's pickle holds";
    return false;
  }
  std::string text(std::size_t(pickleSize), '\0');
  std::unique_ptr<zip_file_t, int (*)(zip_file_t*)> f(zip_fopen_index(z, zip_uint64_t(pickle), 0), zip_fclose);
  if (!f || zip_fread(f.get(), text.data(), pickleSize) != zip_int64_t(pickleSize)) {
    *error = "cannot read the pickle in " + path + " (a damaged archive?)";
    return false;
  }
  std::vector<std::string> globals;
  const bool walked = pickleGlobals(text, &globals);
  bool runsCode = !walked;
  for (const auto& g : globals) {
    if (!weightsOnlyGlobal(g)) {
      runsCode = true;
      if (std::find(info->globals.begin(), info->globals.end(), g) == info->globals.end()) info->globals.push_back(g);
    }
  }
  info->kind = runsCode ? ModelFileKind::WholeModel : ModelFileKind::Checkpoint;
  info->description = runsCode ? path + " is a pickle of Python objects (torch.save(model)): opening it runs code"
                               : path + " is a checkpoint: weights (a state_dict) without code or a graph";
  return true;
}

} // namespace

bool identifyModelFile(const std::string& path, ModelFileInfo* info, std::string* error) {
  *info = ModelFileInfo();
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot read " + path + " (" + std::strerror(errno) + ")";
    return false;
  }
  if (isSafeTensors(in)) {
    info->kind = ModelFileKind::SafeTensors;
    info->description = path + " is a safetensors file: weights without code or a graph";
    return true;
  }
  int code = 0;
  std::unique_ptr<zip_t, int (*)(zip_t*)> z(zip_open(path.c_str(), ZIP_RDONLY, &code), zip_close);
  if (!z) {
    info->description = path + " is neither a zip archive (TorchScript, torch.export .pt2, torch.save) nor a "
                               "safetensors file, so no PyTorch model file HookScope opens; it opens files saved with "
                               "torch.jit.save, torch.export.save and torch.save";
    return true;
  }
  const zip_int64_t entries = zip_get_num_entries(z.get(), 0);
  zip_int64_t pickle = -1;
  std::uint64_t pickleSize = 0;
  for (zip_int64_t i = 0; i < entries; ++i) {
    const char* raw = zip_get_name(z.get(), zip_uint64_t(i), 0);
    if (!raw) continue;
    const std::string name = raw;
    const auto slash = name.find('/');
    const std::string inner = slash == std::string::npos ? name : name.substr(slash + 1);
    if (inner == "archive_format" || inner == "models/model.json") info->kind = ModelFileKind::ExportedProgram;
    if (info->kind == ModelFileKind::Unknown && (inner == "constants.pkl" || inner.rfind("code/", 0) == 0)) {
      info->kind = ModelFileKind::TorchScript;
    }
    zip_stat_t st;
    if (inner == "data.pkl" && zip_stat_index(z.get(), zip_uint64_t(i), 0, &st) == 0) {
      pickle = i;
      pickleSize = st.size;
    }
  }
  if (info->kind == ModelFileKind::TorchScript) {
    info->description = path + " is a TorchScript archive";
    return true;
  }
  if (info->kind == ModelFileKind::ExportedProgram) {
    info->description = path + " is a torch.export program (.pt2)";
    return true;
  }
  if (pickle < 0) {
    info->description = path + " is a zip archive but no PyTorch file: HookScope opens files saved with "
                               "torch.jit.save, torch.export.save and torch.save";
    return true;
  }
  return identifyPickle(z.get(), pickle, pickleSize, path, info, error);
}

} // namespace hookscope
