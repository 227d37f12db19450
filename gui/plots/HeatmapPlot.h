#pragma once

#include "plots/PlotPage.h"
#include "plots/StoreFollower.h"

class QCPColorMap;
class QCPColorScale;

/// The selected series' histograms over steps: step on x, value on y, count as colour.
class HeatmapPlot : public PlotPage {
  Q_OBJECT

public:
  explicit HeatmapPlot(QWidget* parent = nullptr);
  /// Another store: nothing of the previous one's colours either.
  void resetView() override;
  /// The counts the colour bar spans, as log10(1 + count).
  QCPRange colourRange() const;
  void refresh(const ViewState& state) override;
  QString toCsv() const override;
  /// Steps shown (each column holds one or, on long runs, several).
  int columnCount() const { return int(m_series.points().size()); }
  /// Adds one histogram's counts to `rowCount` equal rows spanning [lo, hi], each row
  /// getting the share of every bin it overlaps.
  static void addResampled(const hookscope::TensorStats& stats, double lo, double hi, double* rows, int rowCount);
  /// Cells of one column (0 = first shown step) that hold no count; -1 when there is no such column.
  int emptyRows(int column) const;

protected:
  /// The whole of every cell: the map's ranges are its cells' centres, so the first and last
  /// steps (and the lowest and highest rows) would otherwise show half a cell.
  void fitAxes() override;

private:
  QCPColorMap* m_map;
  QCPColorScale* m_scale;
  SeriesFollower m_series;  ///< the shown series, as last read
};
