#pragma once

#include "plots/PlotPage.h"

class QComboBox;
class QCPGraph;

/// The loss over steps, or another per-step scalar (lr, or what a script passes to hs.step).
/// A job's ranks: the chosen rank's, or with all ranks a line per rank, or when ranks are many
/// the median over ranks with a min–max band.
class LossPlot : public PlotPage {
  Q_OBJECT

public:
  explicit LossPlot(QWidget* parent = nullptr);
  void refresh(const ViewState& state) override;
  QString toCsv() const override;
  /// Points of the first line (the chosen rank's, rank 0's, or the median).
  int pointCount() const;
  /// Points of the compared run's line (0 without one).
  int comparedPointCount() const;
  /// Lines drawn (one per rank with all ranks of a small job) and whether the band is.
  int lineCount() const;
  bool bandShown() const;
  /// The scalar drawn ("loss" unless chosen otherwise).
  QString scalar() const { return m_name; }
  /// Draws another scalar at once (also while paused), named in the heading; its name must be
  /// one the store holds to show anything.
  void setScalar(const QString& name);
  /// Another store: the loss again, not the previous file's chosen scalar.
  void resetView() override;
  /// Named after the scalar shown: "loss", or "lr" while lr is drawn.
  QString fileName() const override;

protected:
  void fitAxes() override;
  /// A loss that spiked by orders of magnitude is readable on a log axis (right-click).
  void logScaleChanged() override;

private:
  /// The scalar drawn from now on, named on the axis and in the heading.
  void nameScalar(const QString& name);
  void updateChoices(const std::vector<std::string>& names);
  /// Makes `count` lines (graph 0 the first) and the band's two edges.
  void ensureLines(int count);

  QComboBox* m_chooser;
  ViewState m_state;  ///< the last drawn, to redraw when the scalar or the axis changes
  QString m_name = QStringLiteral("loss");
  std::uint64_t m_version = 0;
  std::vector<int> m_ranks;  ///< the ranks drawn, one per line; -1: the median
  int m_shownRank = 0;
  bool m_allRanks = false;
  std::vector<QCPGraph*> m_lines;  ///< graph 0 first
  QCPGraph* m_compared = nullptr;  ///< the compared run's scalar, dashed
  const hookscope::CaptureStore* m_comparedDrawn = nullptr;  ///< the compared run last drawn
  QCPGraph* m_bandLow = nullptr;
  QCPGraph* m_bandHigh = nullptr;
};
