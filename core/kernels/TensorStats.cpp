#include "kernels/TensorStats.h"

namespace hookscope {

std::vector<double> TensorStats::edges() const {
  const std::size_t bins = histogram.size();
  std::vector<double> result(bins + 1);
  for (std::size_t i = 0; i <= bins; ++i) {
    result[i] = bins == 0 ? histLow : histLow + (histHigh - histLow) * double(i) / double(bins);
  }
  if (bins > 0) result[bins] = histHigh;
  return result;
}

std::string TensorStats::shapeString() const {
  std::string text;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) text += 'x';
    text += std::to_string(shape[i]);
  }
  return text;
}

std::size_t TensorStats::memoryBytes() const {
  return sizeof(TensorStats) + shape.capacity() * sizeof(std::int64_t) +
         histogram.capacity() * sizeof(std::int64_t) + dtype.capacity();
}

} // namespace hookscope
