#include "PickleRewrite.h"

#include <cstdint>
#include <algorithm>
#include <set>
#include <vector>

namespace hookscope {

namespace {

constexpr std::size_t kMark = std::size_t(-1);

struct Walker {
  explicit Walker(const std::string& b) : bytes(b) {}
  const std::string& bytes;
  std::size_t pos = 0;
  // Stack of where each item's opcodes start (kMark for a MARK), and where MARKs start.
  std::vector<std::size_t> starts;
  std::vector<std::size_t> markOffsets;
  std::vector<std::size_t> insertions;  // where a MARK goes (a SETITEM's key start)
  std::vector<std::size_t> setItems;    // offsets of the SETITEM opcodes
  bool ok = true;

  std::uint64_t readLE(int size) {
    if (pos + std::size_t(size) > bytes.size()) {
      ok = false;
      return 0;
    }
    std::uint64_t value = 0;
    for (int i = 0; i < size; ++i) value |= std::uint64_t(std::uint8_t(bytes[pos + std::size_t(i)])) << (8 * i);
    pos += std::size_t(size);
    return value;
  }
  void skip(std::uint64_t n) {
    if (pos + n > bytes.size()) ok = false;
    pos += std::size_t(n);
  }
  void skipLine() {
    const auto end = bytes.find('\n', pos);
    if (end == std::string::npos) ok = false;
    pos = end + 1;
  }
  std::size_t pop() {
    if (starts.empty() || starts.back() == kMark) {
      ok = false;
      return 0;
    }
    const auto s = starts.back();
    starts.pop_back();
    return s;
  }
  std::size_t popToMark() {
    while (!starts.empty() && starts.back() != kMark) starts.pop_back();
    if (starts.empty() || markOffsets.empty()) {
      ok = false;
      return 0;
    }
    starts.pop_back();
    const auto mark = markOffsets.back();
    markOffsets.pop_back();
    return mark;
  }

  bool run() {
    while (ok && pos < bytes.size()) {
      const std::size_t at = pos;
      const auto op = std::uint8_t(bytes[pos++]);
      switch (op) {
        case '(': starts.push_back(kMark); markOffsets.push_back(at); break;
        case '.': return ok;
        // Push one item, with or without an argument.
        case 'N': case 0x88: case 0x89: case '}': case ']': case ')': case 0x8f:
          starts.push_back(at); break;
        case 'K': case 'h': skip(1); starts.push_back(at); break;
        case 'M': skip(2); starts.push_back(at); break;
        case 'J': case 'j': skip(4); starts.push_back(at); break;
        case 'G': skip(8); starts.push_back(at); break;
        case 0x8a: case 'U': case 0x8c: case 'C': skip(readLE(1)); starts.push_back(at); break;
        case 0x8b: case 'T': case 'X': case 'B': skip(readLE(4)); starts.push_back(at); break;
        case 0x8d: case 0x8e: skip(readLE(8)); starts.push_back(at); break;
        case 'I': case 'L': case 'F': case 'S': case 'V': case 'P': case 'g':
          skipLine(); starts.push_back(at); break;
        case 'c': skipLine(); skipLine(); starts.push_back(at); break;
        // Memo and framing: no stack change.
        case 'q': skip(1); break;
        case 'r': skip(4); break;
        case 'p': skipLine(); break;
        case 0x94: break;
        case 0x80: skip(1); break;
        case 0x95: skip(8); break;
        // Pop to MARK, push the built object.
        case 't': case 'l': case 'd': case 0x91: starts.push_back(popToMark()); break;
        case 'i': skipLine(); skipLine(); starts.push_back(popToMark()); break;
        case '1': popToMark(); break;
        case 'e': case 'u': case 0x90: popToMark(); break;
        case 0x85: starts.push_back(pop()); break;
        case 0x86: pop(); starts.push_back(pop()); break;
        case 0x87: pop(); pop(); starts.push_back(pop()); break;
        case 'R': case 0x81: case 0x93: pop(); starts.push_back(pop()); break;
        case 0x92: pop(); pop(); starts.push_back(pop()); break;
        case 'Q': starts.push_back(pop()); break;
        case 'a': case 'b': case '0': pop(); break;
        case 's': {
          pop();
          const std::size_t keyStart = pop();
          if (ok) {
            insertions.push_back(keyStart);
            setItems.push_back(at);
          }
          break;
        }
        default: return false;  // DUP and anything unusual: leave the pickle alone
      }
    }
    return false;
  }
};

} // namespace

std::string rewriteSetItem(const std::string& pickle) {
  Walker walker(pickle);
  if (!walker.run() || walker.insertions.empty()) return pickle;
  std::vector<std::size_t> marks = walker.insertions;
  std::sort(marks.begin(), marks.end());
  const std::set<std::size_t> setItems(walker.setItems.begin(), walker.setItems.end());
  std::string out;
  out.reserve(pickle.size() + marks.size());
  std::size_t next = 0;
  for (std::size_t i = 0; i < pickle.size(); ++i) {
    while (next < marks.size() && marks[next] == i) {
      out += '(';
      ++next;
    }
    out += setItems.count(i) ? 'u' : pickle[i];
  }
  return out;
}

} // namespace hookscope
