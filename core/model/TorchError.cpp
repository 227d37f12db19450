#include "model/TorchError.h"

#include <c10/util/Exception.h>

namespace hookscope {

std::string summarizeTorchError(const std::exception& e, bool withClass) {
  std::string text = e.what();
  if (const auto* error = dynamic_cast<const c10::Error*>(&e)) text = error->what_without_backtrace();
  for (const char* marker : {"RuntimeError: ", "ValueError: ", "TypeError: ", "IndexError: ", "AssertionError: ",
                             "KeyError: ", "NotImplementedError: "}) {
    const auto pos = text.rfind(marker);
    if (pos != std::string::npos) {
      const auto line = text.substr(withClass ? pos : pos + std::string(marker).size());
      return line.substr(0, line.find('\n'));
    }
  }
  std::size_t start = 0;
  while (start < text.size()) {
    const auto end = text.find('\n', start);
    const auto line = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (line.find_first_not_of(" \t\r") != std::string::npos) return line;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return "no reason given";
}

} // namespace hookscope
