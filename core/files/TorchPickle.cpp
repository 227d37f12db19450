#include "files/TorchPickle.h"

#include <cstring>
#include <limits>
#include <stdexcept>

namespace hookscope::pickle {

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

namespace {

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

} // namespace

Ref unpickle(const std::string& data) { return Unpickler(data).run(); }

} // namespace hookscope::pickle
