#pragma once

#include "PlotPage.h"
#include "StoreFollower.h"

class QCPColorMap;
class QCPColorScale;

/// The selected series' histograms over steps: step on x, value on y, count as colour.
class HeatmapPlot : public PlotPage {
  Q_OBJECT

public:
  explicit HeatmapPlot(QWidget* parent = nullptr);
  void refresh(const ViewState& state) override;
  QString toCsv() const override;
  /// Steps shown (each column holds one or, on long runs, several).
  int columnCount() const { return int(m_points.size()); }

private:
  /// Brings the cached captures up to the store: appends new steps, or reloads.
  void updatePoints(const ViewState& state);

  QCPColorMap* m_map;
  QCPColorScale* m_scale;
  std::vector<hookscope::SeriesPoint> m_points;  ///< the shown series, as last read
  StoreFollower m_follower;
  std::uint64_t m_version = 0;
  hookscope::SeriesKey m_key;
};
