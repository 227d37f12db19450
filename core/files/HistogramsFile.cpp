#include "HistogramsFile.h"

#include "FileLimits.h"
#include "PickleShape.h"

#include <zip.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <variant>

namespace hookscope {

namespace {

constexpr const char* kArchive = "archive";  // torch.save names the zip's folder after the file; any name loads
constexpr std::uint64_t kMaxPickleBytes = 64ull << 20;

// ---------------------------------------------------------------- writing

// Pickle opcodes of protocol 2 (Python's pickletools names).
void putU32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out += char((v >> (8 * i)) & 0xff);
}

void putText(std::string& out, const std::string& text) {
  out += 'X';  // BINUNICODE
  putU32(out, std::uint32_t(text.size()));
  out += text;
}

void putInt(std::string& out, std::int64_t v) {
  if (v >= std::numeric_limits<std::int32_t>::min() && v <= std::numeric_limits<std::int32_t>::max()) {
    out += 'J';  // BININT
    putU32(out, std::uint32_t(std::int32_t(v)));
    return;
  }
  out += '\x8a';  // LONG1: 8 little-endian two's-complement bytes
  out += char(8);
  for (int i = 0; i < 8; ++i) out += char((std::uint64_t(v) >> (8 * i)) & 0xff);
}

void putGlobal(std::string& out, const char* module, const char* name) {
  out += 'c';
  out += module;
  out += '\n';
  out += name;
  out += '\n';
}

// torch._utils._rebuild_tensor_v2(storage, 0, sizes, strides, False, OrderedDict()), with the
// storage as persistent id ('storage', torch.<Type>Storage, key, 'cpu', numel).
void putTensor(std::string& out, const char* storageType, const std::string& key, std::int64_t rows,
               std::int64_t columns, int dims) {
  putGlobal(out, "torch._utils", "_rebuild_tensor_v2");
  out += '(';
  out += '(';
  putText(out, "storage");
  putGlobal(out, "torch", storageType);
  putText(out, key);
  putText(out, "cpu");
  putInt(out, rows * columns);
  out += 't';  // TUPLE
  out += 'Q';  // BINPERSID
  putInt(out, 0);
  out += '(';
  putInt(out, rows);
  if (dims == 2) putInt(out, columns);
  out += 't';
  out += '(';
  if (dims == 2) putInt(out, columns);
  putInt(out, 1);
  out += 't';
  out += '\x89';  // NEWFALSE: requires_grad
  putGlobal(out, "collections", "OrderedDict");
  out += ')';  // EMPTY_TUPLE
  out += 'R';  // REDUCE
  out += 't';
  out += 'R';
}

struct ZipCloser {
  void operator()(zip_t* z) const {
    if (z) zip_discard(z);
  }
};

// Adds a stored record named archive/NAME from `source` (taken over, freed on failure).
bool addSourceRecord(zip_t* z, const std::string& name, zip_source_t* source, std::string* error) {
  const zip_int64_t index = zip_file_add(z, (std::string(kArchive) + "/" + name).c_str(), source, ZIP_FL_ENC_UTF_8);
  if (index < 0) {
    zip_source_free(source);
    *error = zip_strerror(z);
    return false;
  }
  // Stored, as torch.save stores its records.
  if (zip_set_file_compression(z, zip_uint64_t(index), ZIP_CM_STORE, 0) != 0) {
    *error = zip_strerror(z);
    return false;
  }
  return true;
}

bool addRecord(zip_t* z, const std::string& name, const void* data, std::size_t size, std::string* error) {
  zip_source_t* source = zip_source_buffer(z, data, size, 0);
  if (!source) {
    *error = zip_strerror(z);
    return false;
  }
  return addSourceRecord(z, name, source, error);
}

// ---------------------------------------------------------------- reading

struct Value;
using Ref = std::shared_ptr<Value>;

struct Storage {
  std::string key;
  std::string type;  // "LongStorage", "DoubleStorage", ...
};

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

struct Value {
  std::variant<std::monostate, bool, std::int64_t, double, std::string, std::vector<Ref>, Global, Tensor, Storage, Mark,
               std::vector<std::pair<Ref, Ref>>>
      v;
  bool tuple = false;  // a vector<Ref> that is a tuple, not a list
};

Ref make(decltype(Value::v) v, bool tuple = false) {
  auto r = std::make_shared<Value>();
  r->v = std::move(v);
  r->tuple = tuple;
  return r;
}

[[noreturn]] void bad(const std::string& what) { throw std::runtime_error(what); }

std::vector<std::int64_t> intsOf(const Ref& r, const char* what) {
  const auto* items = std::get_if<std::vector<Ref>>(&r->v);
  if (!items) bad(std::string("a tensor's ") + what + " is not a tuple");
  std::vector<std::int64_t> out;
  for (const auto& item : *items) {
    const auto* i = std::get_if<std::int64_t>(&item->v);
    if (!i) bad(std::string("a tensor's ") + what + " holds something other than whole numbers");
    out.push_back(*i);
  }
  return out;
}

// A small unpickler for what torch.save writes of dicts, tuples, numbers, strings and tensors;
// any other opcode or global is refused (it would be code).
class Unpickler {
public:
  Unpickler(const std::string& data) : m_data(data) {}

  Ref run() {
    while (true) {
      const unsigned char op = byte();
      switch (op) {
        case 0x80: byte(); break;  // PROTO
        case 0x95: bytes(8); break;  // FRAME
        case '.': {  // STOP
          if (m_stack.size() != 1) bad("the pickle ends with " + std::to_string(m_stack.size()) + " values");
          return m_stack.back();
        }
        case '}': push(make(std::vector<std::pair<Ref, Ref>>{})); break;
        case ']': push(make(std::vector<Ref>{})); break;
        case ')': push(make(std::vector<Ref>{}, true)); break;
        case '(': push(make(Mark{})); break;
        case 'N': push(make(std::monostate{})); break;
        case 0x88: push(make(true)); break;
        case 0x89: push(make(false)); break;
        case 'J': push(make(std::int64_t(std::int32_t(u32())))); break;
        case 'K': push(make(std::int64_t(byte()))); break;
        case 'M': {
          const std::uint32_t lo = byte();
          push(make(std::int64_t(lo | (std::uint32_t(byte()) << 8))));
          break;
        }
        case 0x8a: {  // LONG1
          const unsigned n = byte();
          if (n > 8) bad("a whole number of over 64 bits");
          const std::string b = bytes(n);
          std::uint64_t v = 0;
          for (unsigned i = 0; i < n; ++i) v |= std::uint64_t(std::uint8_t(b[i])) << (8 * i);
          if (n > 0 && n < 8 && (std::uint8_t(b[n - 1]) & 0x80)) v |= ~std::uint64_t(0) << (8 * n);  // sign
          push(make(std::int64_t(v)));
          break;
        }
        case 'G': {  // BINFLOAT, big-endian
          const std::string b = bytes(8);
          std::uint64_t bits = 0;
          for (int i = 0; i < 8; ++i) bits = (bits << 8) | std::uint8_t(b[std::size_t(i)]);
          double d;
          std::memcpy(&d, &bits, 8);
          push(make(d));
          break;
        }
        case 'X': push(make(bytes(u32()))); break;
        case 0x8c: push(make(bytes(byte()))); break;  // SHORT_BINUNICODE
        case 'U': push(make(bytes(byte()))); break;   // SHORT_BINSTRING
        case 'T': push(make(bytes(u32()))); break;     // BINSTRING
        case 'c': {
          Global g;
          g.module = line();
          g.name = line();
          push(make(g));
          break;
        }
        case 'q': memo(byte()); break;
        case 'r': memo(u32()); break;
        case 0x94: memo(std::uint32_t(m_memo.size())); break;  // MEMOIZE
        case 'h': push(recall(byte())); break;
        case 'j': push(recall(u32())); break;
        case 't': push(make(popMark(), true)); break;
        case 0x85: push(make(popN(1), true)); break;
        case 0x86: push(make(popN(2), true)); break;
        case 0x87: push(make(popN(3), true)); break;
        case 'a': {
          Ref item = pop();
          list(top()).push_back(item);
          break;
        }
        case 'e': {
          auto items = popMark();
          auto& l = list(top());
          l.insert(l.end(), items.begin(), items.end());
          break;
        }
        case 's': {
          Ref value = pop();
          Ref key = pop();
          dict(top()).emplace_back(key, value);
          break;
        }
        case 'u': {
          auto items = popMark();
          if (items.size() % 2) bad("a dict's items do not pair up");
          auto& d = dict(top());
          for (std::size_t i = 0; i < items.size(); i += 2) d.emplace_back(items[i], items[i + 1]);
          break;
        }
        case 'Q': push(persistent(pop())); break;
        case 'R': {
          Ref args = pop();
          Ref callee = pop();
          push(reduce(callee, args));
          break;
        }
        default: bad("the pickle uses opcode 0x" + hex(op) + ", which histograms.pt does not hold");
      }
    }
  }

private:
  static std::string hex(unsigned v) {
    const char* digits = "0123456789abcdef";
    return std::string{digits[(v >> 4) & 15], digits[v & 15]};
  }
  unsigned char byte() {
    if (m_at >= m_data.size()) bad("the pickle is cut short");
    return static_cast<unsigned char>(m_data[m_at++]);
  }
  std::string bytes(std::uint64_t n) {
    if (n > m_data.size() - m_at) bad("the pickle is cut short");
    std::string out = m_data.substr(m_at, std::size_t(n));
    m_at += std::size_t(n);
    return out;
  }
  std::uint32_t u32() {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= std::uint32_t(byte()) << (8 * i);
    return v;
  }
  std::string line() {
    const auto end = m_data.find('\n', m_at);
    if (end == std::string::npos || end - m_at > 256) bad("a global's name is cut short");
    std::string out = m_data.substr(m_at, end - m_at);
    m_at = end + 1;
    return out;
  }
  void push(Ref r) { m_stack.push_back(std::move(r)); }
  Ref pop() {
    if (m_stack.empty() || std::holds_alternative<Mark>(m_stack.back()->v)) bad("the pickle's stack runs empty");
    Ref r = m_stack.back();
    m_stack.pop_back();
    return r;
  }
  Ref& top() {
    if (m_stack.empty()) bad("the pickle's stack runs empty");
    return m_stack.back();
  }
  std::vector<Ref> popMark() {
    std::vector<Ref> items;
    while (!m_stack.empty() && !std::holds_alternative<Mark>(m_stack.back()->v)) {
      items.push_back(m_stack.back());
      m_stack.pop_back();
    }
    if (m_stack.empty()) bad("the pickle has no mark where one is needed");
    m_stack.pop_back();
    return {items.rbegin(), items.rend()};
  }
  std::vector<Ref> popN(int n) {
    std::vector<Ref> items(static_cast<std::size_t>(n));
    for (int i = n; i-- > 0;) items[std::size_t(i)] = pop();
    return items;
  }
  void memo(std::uint32_t index) {
    if (index > (1u << 24)) bad("a memo index is out of range");
    if (m_memo.size() <= index) m_memo.resize(index + 1);
    m_memo[index] = top();
  }
  Ref recall(std::uint32_t index) {
    if (index >= m_memo.size() || !m_memo[index]) bad("the pickle recalls a value it never kept");
    return m_memo[index];
  }
  static std::vector<Ref>& list(Ref& r) {
    auto* l = std::get_if<std::vector<Ref>>(&r->v);
    if (!l || r->tuple) bad("the pickle appends to something that is not a list");
    return *l;
  }
  static std::vector<std::pair<Ref, Ref>>& dict(Ref& r) {
    auto* d = std::get_if<std::vector<std::pair<Ref, Ref>>>(&r->v);
    if (!d) bad("the pickle sets an item of something that is not a dict");
    return *d;
  }
  static Ref persistent(const Ref& id) {
    const auto* parts = std::get_if<std::vector<Ref>>(&id->v);
    if (!parts || parts->size() != 5) bad("a persistent id is not a storage");
    const auto* tag = std::get_if<std::string>(&(*parts)[0]->v);
    const auto* type = std::get_if<Global>(&(*parts)[1]->v);
    const auto* key = std::get_if<std::string>(&(*parts)[2]->v);
    if (!tag || *tag != "storage" || !type || type->module != "torch" || !key) bad("a persistent id is not a storage");
    return make(Storage{*key, type->name});
  }
  static Ref reduce(const Ref& callee, const Ref& args) {
    const auto* g = std::get_if<Global>(&callee->v);
    const auto* a = std::get_if<std::vector<Ref>>(&args->v);
    if (!g || !a) bad("the pickle calls something that is not a known function");
    if (g->module == "collections" && g->name == "OrderedDict" && a->empty()) {
      return make(std::vector<std::pair<Ref, Ref>>{});
    }
    if (g->module == "torch._utils" && g->name == "_rebuild_tensor_v2" && a->size() >= 4) {
      const auto* storage = std::get_if<Storage>(&(*a)[0]->v);
      const auto* offset = std::get_if<std::int64_t>(&(*a)[1]->v);
      if (!storage || !offset) bad("a tensor has no storage or offset");
      return make(Tensor{*storage, *offset, intsOf((*a)[2], "size"), intsOf((*a)[3], "stride")});
    }
    bad("it holds something else, not HookScope's dict of histograms (its pickle calls " + g->module + "." + g->name +
        ", which HookScope does not run)");
  }

  const std::string& m_data;
  std::size_t m_at = 0;
  std::vector<Ref> m_stack;
  std::vector<Ref> m_memo;
};

std::string recordText(zip_t* z, zip_int64_t index, std::uint64_t size) {
  std::unique_ptr<zip_file_t, int (*)(zip_file_t*)> file(zip_fopen_index(z, zip_uint64_t(index), 0), zip_fclose);
  if (!file) bad(std::string("cannot read a record: ") + zip_strerror(z));
  std::string out(std::size_t(size), '\0');
  std::uint64_t got = 0;
  while (got < size) {
    const zip_int64_t n = zip_fread(file.get(), out.data() + got, size - got);
    if (n <= 0) bad("a record is cut short");
    got += std::uint64_t(n);
  }
  return out;
}

// The tensor's values, checked: the storage type the format says, `dims` dimensions, contiguous,
// and inside the bytes its record really holds (never the pickle's own claim of its size).
template <typename T>
std::vector<T> tensorValues(zip_t* z, const std::string& prefix, const Ref& value, const char* storageType, int dims,
                            const std::string& what, std::vector<std::int64_t>* sizes) {
  const auto* t = std::get_if<Tensor>(&value->v);
  if (!t) bad(what + " is not a tensor");
  if (t->storage.type != storageType || int(t->sizes.size()) != dims || t->strides.size() != t->sizes.size()) {
    bad(what + " is not a " + std::to_string(dims) + "-dimensional tensor of " + storageType +
        ": it does not have the shapes and types of the format (steps int64[S], counts int64[S, bins], edges "
        "float64[S, bins+1])");
  }
  std::uint64_t count = 1;
  std::int64_t stride = 1;
  for (int d = dims; d-- > 0;) {
    const std::int64_t size = t->sizes[std::size_t(d)];
    if (size < 0 || size > (std::int64_t(1) << 40)) bad(what + " has a size out of range");
    if (size > 1 && t->strides[std::size_t(d)] != stride) bad(what + " is not stored contiguously");
    count *= std::uint64_t(size);
    if (count > (std::uint64_t(1) << 40)) bad(what + " is too large");
    stride *= std::max<std::int64_t>(size, 1);
  }
  if (t->offset < 0 || t->offset > (std::int64_t(1) << 40)) bad(what + " has a storage offset out of range");
  const std::string name = prefix + "data/" + t->storage.key;
  const zip_int64_t index = zip_name_locate(z, name.c_str(), 0);
  zip_stat_t st;
  if (index < 0 || zip_stat_index(z, zip_uint64_t(index), 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE)) {
    bad(what + "'s storage record " + name + " is missing");
  }
  const std::uint64_t needed = (std::uint64_t(t->offset) + count) * sizeof(T);
  if (needed > st.size) {
    bad(what + " needs " + std::to_string(needed) + " bytes, but its storage record holds " + std::to_string(st.size) +
        ": the file is damaged or was altered");
  }
  const std::string bytes = recordText(z, index, needed);
  std::vector<T> out(static_cast<std::size_t>(count));
  if (count) std::memcpy(out.data(), bytes.data() + std::size_t(t->offset) * sizeof(T), std::size_t(count) * sizeof(T));
  *sizes = t->sizes;
  return out;
}

bool readZip(zip_t* z, std::uint64_t fileBytes, const std::string& path, HistogramTables* tables, std::string* error) {
  try {
    const zip_int64_t entries = zip_get_num_entries(z, 0);
    std::uint64_t inflated = 0;
    std::string prefix;
    zip_int64_t pickleIndex = -1;
    std::uint64_t pickleSize = 0;
    for (zip_int64_t i = 0; i < entries; ++i) {
      zip_stat_t st;
      if (zip_stat_index(z, zip_uint64_t(i), 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE) || !(st.valid & ZIP_STAT_NAME)) {
        bad("a record of the archive cannot be read");
      }
      inflated += st.size;
      const std::string name = st.name;
      const auto slash = name.find('/');
      if (slash != std::string::npos && name.compare(slash, std::string::npos, "/data.pkl") == 0) {
        prefix = name.substr(0, slash + 1);
        pickleIndex = i;
        pickleSize = st.size;
      }
    }
    if (std::string problem = checkInflatedSize(path, fileBytes, inflated); !problem.empty()) bad(problem);
    if (pickleIndex < 0) bad("it holds no data.pkl: it is not a torch.save file");
    if (pickleSize > kMaxPickleBytes) bad("its data.pkl is " + std::to_string(pickleSize) + " bytes, over the limit");
    const std::string pickle = recordText(z, pickleIndex, pickleSize);
    if (std::string problem = checkPickleShape(pickle.data(), pickle.size()); !problem.empty()) bad(problem);
    const Ref root = Unpickler(pickle).run();
    const auto* dict = std::get_if<std::vector<std::pair<Ref, Ref>>>(&root->v);
    if (!dict) bad("it holds something else, not HookScope's dict of histograms");
    tables->clear();
    for (const auto& [key, value] : *dict) {
      const auto* name = std::get_if<std::string>(&key->v);
      if (!name) bad("a key is not a name");
      const std::string entry = "the entry '" + *name + "'";
      const auto* fields = std::get_if<std::vector<std::pair<Ref, Ref>>>(&value->v);
      if (!fields) bad(entry + " is not a dict");
      std::map<std::string, Ref> byName;
      for (const auto& [k, v] : *fields) {
        if (const auto* field = std::get_if<std::string>(&k->v)) byName[*field] = v;
      }
      for (const char* field : {"steps", "counts", "edges"}) {
        if (!byName.count(field)) bad(entry + " has no tensor '" + field + "'");
      }
      HistogramTable table;
      std::vector<std::int64_t> stepSizes, countSizes, edgeSizes;
      table.steps = tensorValues<std::int64_t>(z, prefix, byName["steps"], "LongStorage", 1, entry + "'s steps", &stepSizes);
      table.counts =
          tensorValues<std::int64_t>(z, prefix, byName["counts"], "LongStorage", 2, entry + "'s counts", &countSizes);
      table.edges = tensorValues<double>(z, prefix, byName["edges"], "DoubleStorage", 2, entry + "'s edges", &edgeSizes);
      if (countSizes[0] != stepSizes[0] || edgeSizes[0] != stepSizes[0] || edgeSizes[1] != countSizes[1] + 1) {
        bad(entry + " does not have the shapes of the format (steps int64[S], counts int64[S, bins], edges "
                    "float64[S, bins+1])");
      }
      table.bins = countSizes[1];
      tables->emplace_back(*name, std::move(table));
    }
  } catch (const std::exception& e) {
    *error = e.what();
    return false;
  }
  return true;
}

} // namespace

namespace {

// The series whose values the records being written come from: one at a time, asked for when
// libzip opens its first record (records are written in order at zip_close).
struct SeriesCache {
  const std::function<bool(std::size_t, HistogramTable*, std::string*)>* fill = nullptr;
  const std::vector<HistogramShape>* shapes = nullptr;
  std::size_t index = std::size_t(-1);
  HistogramTable table;
  std::string error;

  bool load(std::size_t i) {
    if (i == index) return true;
    table = HistogramTable{};
    index = std::size_t(-1);
    if (!(*fill)(i, &table, &error)) return false;
    const auto& shape = (*shapes)[i];
    const auto rows = std::size_t(shape.rows), bins = std::size_t(shape.bins);
    if (table.steps.size() != rows || table.counts.size() != rows * bins || table.edges.size() != rows * (bins + 1)) {
      error = "the histograms of '" + shape.name + "' changed while they were written";
      return false;
    }
    index = i;
    return true;
  }
};

// One storage record (steps, counts or edges of a series) as a libzip source.
struct RecordSource {
  SeriesCache* cache;
  std::size_t series;
  int part;  // 0 steps, 1 counts, 2 edges
  std::uint64_t size;
  std::uint64_t offset = 0;
  zip_error_t error;

  const char* bytes() const {
    const auto& t = cache->table;
    return part == 0 ? reinterpret_cast<const char*>(t.steps.data())
                     : part == 1 ? reinterpret_cast<const char*>(t.counts.data()) : reinterpret_cast<const char*>(t.edges.data());
  }
};

zip_int64_t recordCallback(void* state, void* data, zip_uint64_t length, zip_source_cmd_t command) {
  auto* source = static_cast<RecordSource*>(state);
  switch (command) {
    case ZIP_SOURCE_OPEN:
      source->offset = 0;
      if (!source->cache->load(source->series)) {
        zip_error_set(&source->error, ZIP_ER_READ, 0);
        return -1;
      }
      return 0;
    case ZIP_SOURCE_READ: {
      const std::uint64_t n = std::min<std::uint64_t>(length, source->size - source->offset);
      if (n) std::memcpy(data, source->bytes() + source->offset, std::size_t(n));
      source->offset += n;
      return zip_int64_t(n);
    }
    case ZIP_SOURCE_CLOSE: return 0;
    case ZIP_SOURCE_STAT: {
      auto* st = static_cast<zip_stat_t*>(data);
      zip_stat_init(st);
      st->size = source->size;
      st->comp_size = source->size;
      st->comp_method = ZIP_CM_STORE;
      st->valid |= ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_COMP_METHOD;
      return sizeof(zip_stat_t);
    }
    case ZIP_SOURCE_ERROR: return zip_error_to_data(&source->error, data, length);
    case ZIP_SOURCE_FREE:
      zip_error_fini(&source->error);
      delete source;
      return 0;
    case ZIP_SOURCE_SUPPORTS:
      return zip_source_make_command_bitmap(ZIP_SOURCE_OPEN, ZIP_SOURCE_READ, ZIP_SOURCE_CLOSE, ZIP_SOURCE_STAT,
                                            ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE, -1);
    default:
      zip_error_set(&source->error, ZIP_ER_OPNOTSUPP, 0);
      return -1;
  }
}

} // namespace

bool writeHistogramsFile(const std::string& path, const std::vector<HistogramShape>& shapes,
                         const std::function<bool(std::size_t, HistogramTable*, std::string*)>& fill,
                         std::string* error) {
  std::string pickle = "\x80\x02}(";
  int key = 0;
  for (const auto& shape : shapes) {
    putText(pickle, shape.name);
    pickle += "}(";
    putText(pickle, "steps");
    putTensor(pickle, "LongStorage", std::to_string(key++), shape.rows, 1, 1);
    putText(pickle, "counts");
    putTensor(pickle, "LongStorage", std::to_string(key++), shape.rows, shape.bins, 2);
    putText(pickle, "edges");
    putTensor(pickle, "DoubleStorage", std::to_string(key++), shape.rows, shape.bins + 1, 2);
    pickle += 'u';
  }
  pickle += "u.";
  int code = 0;
  std::unique_ptr<zip_t, ZipCloser> z(zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &code));
  if (!z) {
    zip_error_t e;
    zip_error_init_with_code(&e, code);
    *error = std::string("cannot write ") + path + ": " + zip_error_strerror(&e);
    zip_error_fini(&e);
    return false;
  }
  static const char version[] = "3\n";
  static const char byteorder[] = "little";
  if (!addRecord(z.get(), "data.pkl", pickle.data(), pickle.size(), error) ||
      !addRecord(z.get(), "byteorder", byteorder, sizeof byteorder - 1, error)) {
    return false;
  }
  SeriesCache cache;
  cache.fill = &fill;
  cache.shapes = &shapes;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const auto rows = std::uint64_t(shapes[i].rows), bins = std::uint64_t(shapes[i].bins);
    const std::uint64_t sizes[3] = {rows * 8, rows * bins * 8, rows * (bins + 1) * 8};
    for (int part = 0; part < 3; ++part) {
      auto* state = new RecordSource{&cache, i, part, sizes[part], 0, {}};
      zip_error_init(&state->error);
      zip_source_t* source = zip_source_function(z.get(), recordCallback, state);
      if (!source) {
        zip_error_fini(&state->error);
        delete state;
        *error = zip_strerror(z.get());
        return false;
      }
      if (!addSourceRecord(z.get(), "data/" + std::to_string(i * 3 + std::size_t(part)), source, error)) return false;
    }
  }
  if (!addRecord(z.get(), "version", version, sizeof version - 1, error)) return false;
  if (zip_close(z.get()) != 0) {
    *error = cache.error.empty() ? std::string("cannot write ") + path + ": " + zip_strerror(z.get()) : cache.error;
    return false;
  }
  z.release();  // zip_close freed it
  return true;
}

bool writeHistogramsFile(const std::string& path, const HistogramTables& tables, std::string* error) {
  std::vector<HistogramShape> shapes;
  for (const auto& [name, table] : tables) {
    const auto rows = std::int64_t(table.steps.size());
    if (std::int64_t(table.counts.size()) != rows * table.bins || std::int64_t(table.edges.size()) != rows * (table.bins + 1)) {
      *error = "the histograms of '" + name + "' do not have the sizes their steps and bins say";
      return false;
    }
    shapes.push_back({name, rows, table.bins});
  }
  return writeHistogramsFile(path, shapes, [&](std::size_t i, HistogramTable* table, std::string*) {
    *table = tables[i].second;
    return true;
  }, error);
}

bool readHistogramsFile(const std::string& path, HistogramTables* tables, std::string* error) {
  if (std::string problem = checkRegularFile(path, "histograms.pt"); !problem.empty()) {
    *error = problem;
    return false;
  }
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  int code = 0;
  std::unique_ptr<zip_t, ZipCloser> z(zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code));
  if (!z || ec) {
    *error = "it is not in torch.save's zip format (damaged, cut short, or not a torch.save file)";
    return false;
  }
  return readZip(z.get(), std::uint64_t(size), path, tables, error);
}

bool readHistogramsBytes(const std::string& bytes, HistogramTables* tables, std::string* error) {
  zip_error_t e;
  zip_error_init(&e);
  zip_source_t* source = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &e);
  zip_t* raw = source ? zip_open_from_source(source, ZIP_RDONLY | ZIP_CHECKCONS, &e) : nullptr;
  zip_error_fini(&e);
  if (!raw) {
    if (source) zip_source_free(source);
    *error = "it is not in torch.save's zip format (damaged, cut short, or not a torch.save file)";
    return false;
  }
  std::unique_ptr<zip_t, ZipCloser> z(raw);
  return readZip(z.get(), bytes.size(), "histograms.pt", tables, error);
}

} // namespace hookscope
