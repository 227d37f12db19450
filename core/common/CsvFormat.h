#pragma once

#include <string>

namespace hookscope {

/// A double written so that reading it back gives the same value; "nan", "inf", "-inf".
std::string formatDouble(double value);
/// A CSV field, quoted when it holds a comma, quote or newline.
std::string csvField(const std::string& text);

} // namespace hookscope
