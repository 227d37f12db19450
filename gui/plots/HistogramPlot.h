#pragma once

#include "plots/PlotPage.h"

#include "kernels/TensorStats.h"

class QCPGraph;
class QLabel;

/// Histogram of the selected series at the current step, the previous step's as a faint
/// overlay, and its statistics beside it. In a job: the shown rank's, with the same tensor of
/// every other rank as an outline.
class HistogramPlot : public PlotPage {
  Q_OBJECT

public:
  explicit HistogramPlot(QWidget* parent = nullptr);
  void refresh(const ViewState& state) override;
  QString toCsv() const override;
  /// Bars currently drawn for the current step (0 when none).
  int barCount() const;
  /// Other ranks' outlines drawn at the current step.
  int outlineCount() const;
  /// Whether the compared run's histogram of the shown series and step is drawn (an outline).
  bool comparedShown() const;
  /// The statistics beside the plot as a person reads them (plain text).
  QString statsText() const;
  /// Shows the statistics beside the plot, or hides them (the plot's tooltip holds them then):
  /// where a view beside the histogram needs the width.
  void setStatisticsShown(bool shown);
  bool statisticsShown() const;

protected:
  void fitAxes() override;
  /// Why nothing is drawn: nothing selected, hooked but never called, not captured yet.
  QString emptyText(const ViewState& state) const;
  void showStats(const QString& html);

private:
  /// Outlines of the other ranks' same tensor at `step` (-1: none shown).
  void drawOtherRanks(const ViewState& state, std::int64_t step);
  /// The compared run's same tensor at `step`, outlined (-1: none).
  void drawCompared(const ViewState& state, std::int64_t step);
  QCPGraph* m_current;
  QCPGraph* m_previous;
  QCPGraph* m_compared;              ///< the compared run's histogram at this step, outlined
  std::vector<QCPGraph*> m_others;  ///< other ranks' outlines, reused between frames
  QLabel* m_stats;
  hookscope::TensorStats m_shown;
  std::int64_t m_shownStep = -1;
  bool m_hasData = false;
};
