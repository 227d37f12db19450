#pragma once

#include "ViewState.h"

#include <QString>
#include <QWidget>

class QCustomPlot;

/// A plot widget that owns its QCustomPlot, redraws from a ViewState, and exports what it
/// shows as PNG, PDF or CSV.
class PlotPage : public QWidget {
  Q_OBJECT

public:
  explicit PlotPage(const QString& title, QWidget* parent = nullptr);

  QCustomPlot* plot() const { return m_plot; }
  QString title() const { return m_title; }
  /// Redraws from the state; cheap when nothing changed is up to the page.
  virtual void refresh(const ViewState& state) = 0;
  /// Exactly the numbers the plot shows, with a header row.
  virtual QString toCsv() const = 0;
  bool savePng(const QString& path) const;
  bool savePdf(const QString& path) const;
  bool saveCsv(const QString& path) const;

protected:
  void changeEvent(QEvent* event) override;
  /// Applies the palette's colors to axes and background.
  void applyPalette();
  /// Marks the step being looked at with a vertical line (hidden when step < 0).
  void setStepMarker(double step, bool visible);
  /// Repaints only the marker's layer: what scrubbing needs when the data did not change.
  void replotMarker();
  /// Right-click menu: save this plot as PNG, PDF or CSV, or reset its zoom.
  void showContextMenu(const QPoint& at);

  QCustomPlot* m_plot;
  QString m_title;

private:
  class QCPItemStraightLine* m_marker = nullptr;
};
