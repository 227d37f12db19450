#include "common/ModelTypes.h"

#include <sstream>

namespace hookscope {

std::string GradientIntervention::describe() const {
  std::ostringstream out;
  switch (kind) {
    case Clamp: out << "clamp " << value; break;
    case Scale: out << "scale " << value; break;
    case Zero: out << "zero"; break;
    default: break;
  }
  return out.str();
}

std::string OutputIntervention::describe() const {
  return kind == Zero ? "zero" : kind == Mean ? "mean" : "";
}

} // namespace hookscope
