#include "common/PrintableText.h"

#include <cstdint>
#include <cstdio>

namespace hookscope {

namespace {

void appendByte(std::string* out, unsigned char byte) {
  char escaped[8];
  std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
  *out += escaped;
}

// The length of the valid UTF-8 sequence at `text[i]` and its code point; 0 when not valid
// (overlong forms, surrogates and values past U+10FFFF are not).
std::size_t decode(std::string_view text, std::size_t i, std::uint32_t* codePoint) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  std::size_t length = 0;
  std::uint32_t value = 0;
  if (lead < 0x80) {
    *codePoint = lead;
    return 1;
  } else if ((lead & 0xe0) == 0xc0) {
    length = 2;
    value = lead & 0x1f;
  } else if ((lead & 0xf0) == 0xe0) {
    length = 3;
    value = lead & 0x0f;
  } else if ((lead & 0xf8) == 0xf0) {
    length = 4;
    value = lead & 0x07;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    value = (value << 6) | (byte(i + k) & 0x3f);
  }
  static const std::uint32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
  if (value < smallest[length] || value > 0x10ffff || (value >= 0xd800 && value <= 0xdfff)) return 0;
  *codePoint = value;
  return length;
}

bool unsafe(std::uint32_t c, bool multiline) {
  if (c == '\n' || c == '\t') return !multiline;
  if (c < 0x20 || c == 0x7f || (c >= 0x80 && c <= 0x9f)) return true;
  return (c >= 0x202a && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069);  // bidirectional overrides
}

} // namespace

std::string printableText(std::string_view text, bool multiline) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    std::uint32_t c = 0;
    const std::size_t length = decode(text, i, &c);
    if (length == 0) {
      appendByte(&out, static_cast<unsigned char>(text[i]));
      ++i;
      continue;
    }
    if (!unsafe(c, multiline)) {
      out.append(text.substr(i, length));
    } else if (c < 0x100) {
      appendByte(&out, static_cast<unsigned char>(c));
    } else {
      char escaped[16];
      std::snprintf(escaped, sizeof escaped, "\\u{%04x}", unsigned(c));
      out += escaped;
    }
    i += length;
  }
  return out;
}

std::string cutAtCharacter(std::string text, std::size_t bytes) {
  if (text.size() <= bytes) return text;
  std::size_t cut = bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  text.resize(cut);
  return text;
}

} // namespace hookscope
