#pragma once

#include <string>

namespace hookscope {

/// LibTorch 1.13's unpickler lacks SETITEM, which Python emits for a one-entry dict such
/// as torch.save({"inputs": x}). Returns the pickle with every SETITEM rewritten as
/// MARK ... SETITEMS (same meaning), or the input unchanged when it has none or holds an
/// opcode this rewrite does not follow.
std::string rewriteSetItem(const std::string& pickle);

} // namespace hookscope
