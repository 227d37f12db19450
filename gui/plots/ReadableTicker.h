#pragma once

#include "plots/QCustomPlotInclude.h"

/// A linear axis ticker that puts at least two ticks inside any range it shows: a narrow plot
/// (a histogram or heatmap at 1024x700) whose range holds a single nice step got one label
/// ("0") that said nothing of the scale. The step is QCustomPlot's, made smaller through the
/// 1-2-5 sequence until two ticks fall inside.
class ReadableTicker : public QCPAxisTicker {
public:
  /// Ticks at multiples of `step` inside `range`.
  static int ticksInside(const QCPRange& range, double step);
  /// The next smaller step of the 1-2-5 sequence (5 -> 2, 2.5 -> 2, 2 -> 1, 1 -> 0.5).
  static double smallerStep(double step);

protected:
  double getTickStep(const QCPRange& range) override;
};
