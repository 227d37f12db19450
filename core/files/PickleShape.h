#pragma once

#include <cstddef>
#include <string>

namespace hookscope {

/// How deep a data file may nest containers (lists in lists, tuples in dicts...).
constexpr int kMaxPickleDepth = 1000;

/// Reads a pickle's opcodes without building anything and checks the shape of everything it
/// would build (the value, and what it builds and drops on the way): containers nested at most
/// `maxDepth` deep, and no container that holds itself.
/// "" when it is fine; otherwise what is wrong, for a message. Both would make the recursive
/// code that later walks or frees the value overflow the stack (or loop forever).
std::string checkPickleShape(const char* data, std::size_t size, int maxDepth = kMaxPickleDepth);

} // namespace hookscope
