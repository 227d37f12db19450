#include "plots/ReadableLogTicker.h"

#include <cmath>
#include <initializer_list>

namespace {

int ticksInside(const QVector<double>& ticks, const QCPRange& range) {
  int n = 0;
  for (double t : ticks) n += range.contains(t);
  return n;
}

// mantissa x 10^e for every decade that meets the range, one tick beyond it on each side.
QVector<double> decadeTicks(const QCPRange& range, std::initializer_list<double> mantissas) {
  QVector<double> ticks;
  const int first = int(std::floor(std::log10(range.lower))) - 1;
  const int last = int(std::ceil(std::log10(range.upper)));
  for (int e = first; e <= last; ++e) {
    for (double m : mantissas) ticks.append(m * std::pow(10.0, e));
  }
  return ticks;
}

bool powersOfTen(const QVector<double>& ticks) {
  for (double t : ticks) {
    const double e = std::log10(t);
    if (!(t > 0) || std::abs(e - std::round(e)) > 1e-9) return false;
  }
  return true;
}

} // namespace

QVector<double> ReadableLogTicker::createTickVector(double tickStep, const QCPRange& range) {
  QVector<double> ticks = QCPAxisTickerLog::createTickVector(tickStep, range);
  if (!(range.lower > 0) || !(range.upper > range.lower)) return ticks;
  // QCustomPlot's own within a decade or so are evenly spaced values (0.05, 0.1, ... 0.35),
  // which crowd at the top of a log axis: only its powers of ten are taken as they are.
  if (powersOfTen(ticks) && ticksInside(ticks, range) >= 2) return ticks;
  for (auto mantissas : {std::initializer_list<double>{1, 2, 5}, std::initializer_list<double>{1, 2, 3, 4, 5, 6, 7, 8, 9}}) {
    ticks = decadeTicks(range, mantissas);
    if (ticksInside(ticks, range) >= 2) return ticks;
  }
  return QCPAxisTicker::createTickVector(QCPAxisTicker::getTickStep(range), range);
}
