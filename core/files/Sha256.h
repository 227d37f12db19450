#pragma once

#include <string>

namespace hookscope {

/// Hex SHA-256 of a file's bytes; "" when it cannot be read.
std::string sha256File(const std::string& path);
/// Hex SHA-256 of a byte string.
std::string sha256Hex(const std::string& bytes);

} // namespace hookscope
