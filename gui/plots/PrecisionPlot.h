#pragma once

#include "plots/PlotPage.h"
#include "plots/StoreFollower.h"

#include <array>

class QCPGraph;
class QCPItemText;

/// The selected series' low-precision counts over steps, as percentages of its values: what
/// float16 would overflow or flush to zero, and what fp8 E4M3 and E5M2 would flush after
/// per-tensor amax scaling (docs/export-format.md).
class PrecisionPlot : public PlotPage {
  Q_OBJECT

public:
  explicit PrecisionPlot(QWidget* parent = nullptr);
  void refresh(const ViewState& state) override;
  QString toCsv() const override;
  /// Points drawn of count `count` (an index into hookscope::kPrecisionCounts).
  int pointCount(int count) const;
  /// The note drawn instead of lines ("" while lines are drawn).
  QString note() const;
  void resetView() override;

protected:
  void fitAxes() override;

private:
  void showNote(const QString& text);

  std::array<QCPGraph*, 4> m_lines{};
  QCPItemText* m_note;
  SeriesFollower m_series;
};
