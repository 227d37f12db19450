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
  QString statsText() const;

protected:
  void fitAxes() override;
  /// Why nothing is drawn: nothing selected, hooked but never called, not captured yet.
  QString emptyText(const ViewState& state) const;

private:
  QCPGraph* m_current;
  QCPGraph* m_previous;
  std::vector<QCPGraph*> m_others;  ///< other ranks' outlines, reused between frames
  QLabel* m_stats;
  hookscope::TensorStats m_shown;
  std::int64_t m_shownStep = -1;
  bool m_hasData = false;
};
