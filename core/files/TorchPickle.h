#pragma once
// The pickle inside a torch.save file, without LibTorch: a protocol-2 writer for dicts of
// tensors (what histograms.pt holds), and a reader that builds only dicts, lists, tuples,
// numbers, strings and references to tensors' storages. Any other global is refused: calling
// it would run code.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace hookscope::pickle {

// ---- writing (opcodes of protocol 2, Python's pickletools names)

void putU32(std::string& out, std::uint32_t v);
/// BINUNICODE.
void putText(std::string& out, const std::string& text);
/// BININT, or LONG1 beyond 32 bits.
void putInt(std::string& out, std::int64_t v);
/// GLOBAL module.name.
void putGlobal(std::string& out, const char* module, const char* name);
/// torch._utils._rebuild_tensor_v2(storage, 0, sizes, strides, False, OrderedDict()), with the
/// storage as persistent id ('storage', torch.<storageType>, key, 'cpu', numel): a contiguous
/// tensor of `rows` (dims 1) or `rows` x `columns` (dims 2).
void putTensor(std::string& out, const char* storageType, const std::string& key, std::int64_t rows,
               std::int64_t columns, int dims);

// ---- reading

struct Value;
using Ref = std::shared_ptr<Value>;

/// A persistent id: the storage's record key and type ("LongStorage", "DoubleStorage", ...).
struct Storage {
  std::string key;
  std::string type;
};

/// A tensor as the pickle describes it; nothing is read from its storage.
struct Tensor {
  Storage storage;
  std::int64_t offset = 0;
  std::vector<std::int64_t> sizes;
  std::vector<std::int64_t> strides;
};

struct Global {
  std::string module;
  std::string name;
};

struct Mark {};

using Dict = std::vector<std::pair<Ref, Ref>>;

struct Value {
  std::variant<std::monostate, bool, std::int64_t, double, std::string, std::vector<Ref>, Global, Tensor, Storage, Mark, Dict>
      v;
  bool tuple = false;  ///< a vector<Ref> that is a tuple, not a list
};

/// The value `data` pickles; throws std::runtime_error saying what is wrong (an opcode or a
/// global it does not take, a truncated or inconsistent pickle). Check its shape first
/// (checkPickleShape): the reader is recursive in what it builds.
Ref unpickle(const std::string& data);

} // namespace hookscope::pickle
