#include "plots/ReadableTicker.h"

#include <algorithm>
#include <cmath>

int ReadableTicker::ticksInside(const QCPRange& range, double step) {
  if (!(step > 0) || !std::isfinite(range.lower) || !std::isfinite(range.upper)) return 0;
  return int(std::floor(range.upper / step) - std::ceil(range.lower / step)) + 1;
}

double ReadableTicker::smallerStep(double step) {
  const double decade = std::pow(10.0, std::floor(std::log10(step)));
  const double mantissa = step / decade;
  if (mantissa > 2.01) return 2 * decade;  // 5 and 2.5 -> 2
  if (mantissa > 1.99) return decade;
  return decade / 2;
}

double ReadableTicker::largerStep(double step) {
  const double decade = std::pow(10.0, std::floor(std::log10(step)));
  const double mantissa = step / decade;
  if (mantissa < 1.99) return 2 * decade;
  if (mantissa < 4.99) return 5 * decade;
  return 10 * decade;
}

double ReadableTicker::getTickStep(const QCPRange& range) {
  double step = QCPAxisTicker::getTickStep(range);
  for (int i = 0; i < 12 && step > 0 && ticksInside(range, step) < 2; ++i) step = smallerStep(step);
  for (int i = 0; i < 12 && step > 0 && ticksInside(range, step) > std::max(2, m_maxTicks); ++i) {
    const double wider = largerStep(step);
    if (ticksInside(range, wider) < 2) break;
    step = wider;
  }
  return step;
}
