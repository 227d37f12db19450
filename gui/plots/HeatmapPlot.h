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
  /// What the map shows while a run is compared: the shown run's histograms, the compared run's,
  /// or |log10(1 + a) - log10(1 + b)| per cell on one grid (right-click; without a compared run,
  /// the shown run's).
  enum class Source { Shown, Compared, Difference };
  void setSource(Source source);
  QString scaleLabel() const;
  Source source() const { return m_source; }

Q_SIGNALS:
  /// Right-click > Deviation from its band: the deviation view, the selected layer's row outlined.
  void deviationRequested();

protected:
  /// The whole of every cell: the map's ranges are its cells' centres, so the first and last
  /// steps (and the lowest and highest rows) would otherwise show half a cell.
  void fitAxes() override;
  void addMenuActions(class QMenu* menu) override;

private:
  /// No cells, and the colour bar's neutral 0..1.
  void clearMap();
  void labelScale(Source source);

  QCPColorMap* m_map;
  QCPColorScale* m_scale;
  SeriesFollower m_series;  ///< the shown series, as last read
  ViewState m_state;        ///< the last drawn, to draw again when the source changes
  Source m_source = Source::Shown;
  const hookscope::CaptureStore* m_comparedDrawn = nullptr;
  bool m_redraw = false;
};
