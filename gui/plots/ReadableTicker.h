#pragma once

#include "plots/QCustomPlotInclude.h"

/// A linear axis ticker that puts at least two ticks inside any range it shows: a narrow plot
/// (a histogram or heatmap at 1024x700) whose range holds a single nice step got one label
/// ("0") that said nothing of the scale. The step is QCustomPlot's, made smaller through the
/// 1-2-5 sequence until two ticks fall inside.
class ReadableTicker : public QCPAxisTicker {
public:
  /// At most this many ticks inside the range (the plot's room over one label's width), unless
  /// that leaves fewer than two: a 40 px heatmap ran "0", "10" and "20" together as "01020".
  void setMaxTicks(int ticks) { m_maxTicks = ticks; }
  /// The next larger step of the 1-2-5 sequence (1 -> 2, 2 -> 5, 5 -> 10).
  static double largerStep(double step);
  /// Ticks at multiples of `step` inside `range`.
  static int ticksInside(const QCPRange& range, double step);
  /// The next smaller step of the 1-2-5 sequence (5 -> 2, 2.5 -> 2, 2 -> 1, 1 -> 0.5).
  static double smallerStep(double step);

protected:
  double getTickStep(const QCPRange& range) override;

private:
  int m_maxTicks = 1 << 20;
};
