#pragma once
// Text that came from a file or a peer, made safe to print on a terminal.

#include <cstddef>
#include <string>
#include <string_view>

namespace hookscope {

/// `text` with every byte that is not valid UTF-8 written as \xNN, and every control character
/// (C0, DEL, C1) and bidirectional override written as \xNN or \u{NNNN}, so that a name in a
/// model, data or export file cannot move the cursor, recolour or reorder a terminal. Newlines
/// and tabs are kept when `multiline` is true.
std::string printableText(std::string_view text, bool multiline = true);

/// At most the first `bytes` bytes of UTF-8 `text`, cut at a character's start.
std::string cutAtCharacter(std::string text, std::size_t bytes);

} // namespace hookscope
