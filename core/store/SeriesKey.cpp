#include "store/SeriesKey.h"

namespace hookscope {

std::string ownerModule(const SeriesKey& key) {
  if (!isParameterKind(key.kind)) return key.module;
  const auto dot = key.module.rfind('.');
  return dot == std::string::npos ? std::string() : key.module.substr(0, dot);
}

} // namespace hookscope
