#pragma once

#include "plots/QCustomPlotInclude.h"

/// A logarithmic axis ticker that labels at least two ticks inside any range it shows: powers
/// of ten when the range spans decades, then 1-2-5 within a decade, then every mantissa 1..9,
/// and within one of those steps evenly spaced ticks (norms between 0.002 and 0.006 get 0.002,
/// 0.003, ... not one label at 0.01 off the data).
class ReadableLogTicker : public QCPAxisTickerLog {
protected:
  QVector<double> createTickVector(double tickStep, const QCPRange& range) override;
};
