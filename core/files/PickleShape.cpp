#include "files/PickleShape.h"

#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <vector>

namespace hookscope {

namespace {

constexpr int kMark = -2;  // a MARK on the simulated stack
constexpr int kAtom = -1;  // a number, string, None... anything that holds nothing

// Reads opcodes and keeps, instead of values, the containers they create and what each holds:
// node ids on the stack and in the memo, an edge from a container to every item put into it.
// Items are tracked by identity, so a list filled through the memo after it was put into
// another one still counts.
class ShapeReader {
public:
  ShapeReader(const unsigned char* data, std::size_t size) : m_data(data), m_size(size) {}

  std::string read(int* root) {
    while (m_at < m_size) {
      const std::size_t at = m_at;
      const unsigned char op = m_data[m_at++];
      if (op == '.') {
        if (m_stack.empty()) return "data.pkl stops with nothing built";
        *root = m_stack.back();
        return "";
      }
      if (std::string problem = step(op); !problem.empty()) return problem + " (byte " + std::to_string(at) + ")";
    }
    return "data.pkl ends before its STOP opcode: the file is truncated";
  }

  const std::vector<std::vector<int>>& children() const { return m_children; }

private:
  int newNode() {
    m_children.emplace_back();
    return int(m_children.size() - 1);
  }
  void hold(int container, int item) {
    if (container >= 0 && item >= 0) m_children[std::size_t(container)].push_back(item);
  }
  bool skip(std::size_t n) {
    if (m_size - m_at < n) return false;
    m_at += n;
    return true;
  }
  bool readUint(std::size_t bytes, std::uint64_t* value) {
    if (m_size - m_at < bytes) return false;
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < bytes; ++i) v |= std::uint64_t(m_data[m_at + i]) << (8 * i);
    m_at += bytes;
    *value = v;
    return true;
  }
  bool skipLine() {
    const void* end = std::memchr(m_data + m_at, '\n', m_size - m_at);
    if (!end) return false;
    m_at = std::size_t(static_cast<const unsigned char*>(end) - m_data) + 1;
    return true;
  }
  bool readLineNumber(std::uint64_t* value) {
    const std::size_t from = m_at;
    if (!skipLine()) return false;
    std::uint64_t v = 0;
    for (std::size_t i = from; i + 1 < m_at; ++i) {
      if (m_data[i] < '0' || m_data[i] > '9' || v > (UINT64_MAX - 9) / 10) return false;
      v = v * 10 + (m_data[i] - '0');
    }
    *value = v;
    return true;
  }
  bool pop(int* item) {
    if (m_stack.empty() || m_stack.back() == kMark) return false;
    *item = m_stack.back();
    m_stack.pop_back();
    return true;
  }
  // Pops everything above the topmost MARK, and the MARK.
  bool popToMark(std::vector<int>* items) {
    items->clear();
    while (!m_stack.empty() && m_stack.back() != kMark) {
      items->push_back(m_stack.back());
      m_stack.pop_back();
    }
    if (m_stack.empty()) return false;
    m_stack.pop_back();
    return true;
  }
  bool top(int* item) const {
    if (m_stack.empty() || m_stack.back() == kMark) return false;
    *item = m_stack.back();
    return true;
  }
  // A new container holding the popped `items`.
  void pushContainer(const std::vector<int>& items) {
    const int node = newNode();
    for (int item : items) hold(node, item);
    m_stack.push_back(node);
  }

  std::string step(unsigned char op) {
    const std::string damaged = "data.pkl is damaged";
    std::uint64_t n = 0;
    int a = 0, b = 0, c = 0;
    std::vector<int>& items = m_items;
    switch (op) {
      case '(': m_stack.push_back(kMark); return "";
      case 'N': case 0x88: case 0x89: case 0x97: m_stack.push_back(kAtom); return "";
      case ')': case ']': case '}': case 0x8f: m_stack.push_back(newNode()); return "";
      case '0': if (m_stack.empty()) return damaged; m_stack.pop_back(); return "";
      case '1': return popToMark(&items) ? "" : damaged;
      case '2': if (!top(&a)) return damaged; m_stack.push_back(a); return "";
      case 'a': if (!pop(&a) || !top(&b)) return damaged; hold(b, a); return "";
      case 'e': case 'u': case 0x90:
        if (!popToMark(&items) || !top(&b)) return damaged;
        for (int item : items) hold(b, item);
        return "";
      case 's': if (!pop(&a) || !pop(&c) || !top(&b)) return damaged; hold(b, a); hold(b, c); return "";
      case 't': case 'l': case 'd': case 0x91: case 'o':
        if (!popToMark(&items)) return damaged;
        pushContainer(items);
        return "";
      case 0x85: case 0x86: case 0x87: {
        items.clear();
        for (int i = 0; i < op - 0x84; ++i) {
          if (!pop(&a)) return damaged;
          items.push_back(a);
        }
        pushContainer(items);
        return "";
      }
      case 'R': case 0x81:  // REDUCE, NEWOBJ: callable(args)
        if (!pop(&a) || !pop(&b)) return damaged;
        pushContainer({a, b});
        return "";
      case 0x92:  // NEWOBJ_EX
        if (!pop(&a) || !pop(&b) || !pop(&c)) return damaged;
        pushContainer({a, b, c});
        return "";
      case 'b': if (!pop(&a) || !top(&b)) return damaged; hold(b, a); return "";
      case 'Q': if (!pop(&a)) return damaged; pushContainer({a}); return "";
      case 0x93: if (!pop(&a) || !pop(&b)) return damaged; m_stack.push_back(kAtom); return "";
      case 0x94: if (!top(&a)) return damaged; m_memo[m_memo.size()] = a; return "";
      case 0x98: return top(&a) ? "" : damaged;
      case 0x80: return skip(1) ? "" : damaged;
      case 0x95: return skip(8) ? "" : damaged;
      case 'J': case 'K': case 'M': case 'G': case 0x82: case 0x83: case 0x84:
        if (!skip(op == 'J' || op == 0x84 ? 4 : op == 'K' || op == 0x82 ? 1 : op == 'G' ? 8 : 2)) return damaged;
        m_stack.push_back(kAtom);
        return "";
      case 'h': case 'j': case 'g': {
        const bool ok = op == 'g' ? readLineNumber(&n) : readUint(op == 'h' ? 1 : 4, &n);
        const auto found = m_memo.find(n);
        if (!ok || found == m_memo.end()) return damaged + ": it reads a memo entry it never wrote";
        m_stack.push_back(found->second);
        return "";
      }
      case 'q': case 'r': case 'p': {
        const bool ok = op == 'p' ? readLineNumber(&n) : readUint(op == 'q' ? 1 : 4, &n);
        if (!ok || !top(&a)) return damaged;
        m_memo[n] = a;
        return "";
      }
      case 0x8a: case 0x8b: case 'T': case 'U': case 'B': case 'C': case 'X': case 0x8c: case 0x8d: case 0x8e: case 0x96: {
        const std::size_t width = op == 0x8a || op == 'U' || op == 'C' || op == 0x8c ? 1
                                  : op == 0x8d || op == 0x8e || op == 0x96        ? 8
                                                                                  : 4;
        if (!readUint(width, &n) || !skip(n)) return damaged + ": a length runs past its end";
        m_stack.push_back(kAtom);
        return "";
      }
      case 'I': case 'L': case 'F': case 'S': case 'V':
        if (!skipLine()) return damaged;
        m_stack.push_back(kAtom);
        return "";
      case 'P': if (!skipLine()) return damaged; m_stack.push_back(newNode()); return "";
      case 'c': if (!skipLine() || !skipLine()) return damaged; m_stack.push_back(kAtom); return "";
      case 'i':
        if (!skipLine() || !skipLine() || !popToMark(&items)) return damaged;
        pushContainer(items);
        return "";
      default: {
        static const char hex[] = "0123456789abcdef";
        return damaged + ": unknown opcode 0x" + hex[op >> 4] + hex[op & 15];
      }
    }
  }

  const unsigned char* m_data;
  std::size_t m_size;
  std::size_t m_at = 0;
  std::vector<int> m_stack;
  std::unordered_map<std::uint64_t, int> m_memo;
  std::vector<std::vector<int>> m_children;
  std::vector<int> m_items;
};

std::string tooDeep(int maxDepth) {
  return "the data nests containers more than " + std::to_string(maxDepth) +
         " levels deep (lists in lists...): save the inputs as tensors or a flat tuple of tensors";
}

} // namespace

std::string checkPickleShape(const char* data, std::size_t size, int maxDepth) {
  ShapeReader reader(reinterpret_cast<const unsigned char*>(data), size);
  int root = kAtom;
  if (std::string problem = reader.read(&root); !problem.empty()) return problem;
  // Longest chain of containers below every container the pickle builds, not only those the
  // value holds: one left on the stack under the value, popped, or kept in the memo is built
  // and freed as well. Iterative depth-first walks; a node met again while it is being walked
  // is a container that holds itself.
  const auto& children = reader.children();
  enum : std::uint8_t { kNew, kOpen, kDone };
  std::vector<std::uint8_t> state(children.size(), kNew);
  std::vector<int> depth(children.size(), 1);
  std::vector<std::pair<int, std::size_t>> path;  // node, next child to visit
  for (std::size_t start = 0; start < children.size(); ++start) {
    if (state[start] != kNew) continue;
    state[start] = kOpen;
    path.emplace_back(int(start), 0);
    while (!path.empty()) {
      auto& [node, next] = path.back();
      const auto& kids = children[std::size_t(node)];
      if (next < kids.size()) {
        const int child = kids[next++];
        if (state[std::size_t(child)] == kOpen) return "the data holds a container that contains itself: save it without the cycle";
        if (state[std::size_t(child)] == kNew) {
          if (int(path.size()) >= maxDepth) return tooDeep(maxDepth);
          state[std::size_t(child)] = kOpen;
          path.emplace_back(child, 0);
        }
        continue;
      }
      for (int child : kids) depth[std::size_t(node)] = std::max(depth[std::size_t(node)], depth[std::size_t(child)] + 1);
      state[std::size_t(node)] = kDone;
      const int finished = node;
      path.pop_back();
      if (depth[std::size_t(finished)] > maxDepth) return tooDeep(maxDepth);
    }
  }
  return "";
}

} // namespace hookscope
