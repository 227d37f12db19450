#pragma once

#include "PlotPage.h"

class QCPColorMap;
class QCPColorScale;

/// The selected series' histograms over steps: step on x, value on y, count as colour.
class HeatmapPlot : public PlotPage {
  Q_OBJECT

public:
  explicit HeatmapPlot(QWidget* parent = nullptr);
  void refresh(const ViewState& state) override;
  QString toCsv() const override;
  /// Steps drawn as columns.
  int columnCount() const { return m_columns; }

private:
  QCPColorMap* m_map;
  QCPColorScale* m_scale;
  int m_columns = 0;
  std::uint64_t m_version = 0;
  hookscope::SeriesKey m_key;
};
