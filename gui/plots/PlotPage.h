#pragma once

#include "plots/ViewState.h"

#include <QColor>
#include <QString>
#include <QWidget>

#include <utility>
#include <vector>

class QCustomPlot;
class QCPRange;


/// A plot widget that owns its QCustomPlot, redraws from a ViewState, and exports what it
/// shows as PNG, PDF or CSV.
class PlotPage : public QWidget {
  Q_OBJECT

public:
  explicit PlotPage(const QString& title, QWidget* parent = nullptr);

  QCustomPlot* plot() const { return m_plot; }
  /// The page's name, as its exported files are named ("loss.png").
  QString title() const { return m_title; }
  /// The heading drawn above the plot (the title unless a page shows something else).
  QString heading() const;
  /// Whether the heading drawn is whole in its cell of the plot's layout.
  bool headingFits() const;
  /// Redraws from the state; cheap when nothing changed is up to the page.
  virtual void refresh(const ViewState& state) = 0;
  /// Exactly the numbers the plot shows, with a header row.
  virtual QString toCsv() const = 0;
  /// The name its exported files take, without extension ("loss", "gradient_norm_per_layer").
  virtual QString fileName() const;
  virtual bool savePng(const QString& path) const;
  /// savePng's image with a legend of its own under the plot, every entry's colour and name in
  /// columns (a plot of more lines than its own legend shows).
  bool savePngWithLegend(const QString& path, const std::vector<std::pair<QString, QColor>>& entries) const;
  bool savePdf(const QString& path) const;
  bool saveCsv(const QString& path) const;
  /// Fits both axes to everything drawn, and from then on keeps fitting them after every new
  /// step (until the user zooms or pans again): "Fit to data", or a double-click.
  void fitToData();
  /// Another store (a model opened, a script attached, an export reopened): neutral axes until
  /// its data arrives, nothing of the previous one's ranges, and the view fitted again.
  virtual void resetView();
  /// A logarithmic value axis, labelled at two ticks or more inside the range it shows; pages
  /// that offer it have "Logarithmic axis" in their right-click menu.
  void setLogScale(bool on);
  bool logScale() const { return m_log; }
  /// Whether the user zoomed or panned since the last fit: new steps then keep their view.
  bool userView() const { return m_userView; }

protected:
  void changeEvent(QEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  /// Applies the palette's colors to axes and background.
  void applyPalette();
  /// Draws another heading above the plot (a scalar's name on the loss page); `shortText`
  /// replaces it while the plot is too narrow for it, so that no heading is cut.
  void setHeading(const QString& text, const QString& shortText = QString());
  /// The x axis counts steps: labelled "step", ticks on whole steps only (a run of 3 steps has
  /// no tick at 0.4).
  void setStepAxis();
  /// Marks the step being looked at with a vertical line (hidden when step < 0).
  void setStepMarker(double step, bool visible);
  /// A text in the middle of the plot, for what it shows instead of data ("Select a layer").
  class QCPItemText* addCentredNote();
  /// Repaints only the marker's layer: what scrubbing needs when the data did not change.
  void replotMarker();
  /// Right-click menu: save this plot as PNG, PDF or CSV, or reset its zoom.
  void showContextMenu(const QPoint& at);
  /// Sets the axes to the data's ranges; the default rescales to every plottable.
  virtual void fitAxes();
  /// [lo, hi] with a margin, so that no point is drawn on the axis itself; on a log axis the
  /// margin is a factor. A single value gets a range around it.
  static QCPRange paddedRange(double lo, double hi, bool log);
  /// Steps first..last on a step axis; one step alone gets a step on either side.
  static QCPRange stepRange(double first, double last);
  /// What refresh calls after new data: fits unless the user chose a view.
  void autoFit();
  /// Adds page-specific entries to the right-click menu.
  virtual void addMenuActions(class QMenu* menu) { Q_UNUSED(menu) }
  /// After setLogScale changed the value axis: the page redraws what depends on it (by default
  /// the axes are fitted again).
  virtual void logScaleChanged() { fitToData(); }

  QCustomPlot* m_plot;
  QString m_title;
  QSize m_axisMargins{80, 70};  ///< around the axis rect at the last layout: labels, heading, a colour bar
  bool m_offersLogScale = false;  ///< "Logarithmic axis" in the right-click menu
  bool m_log = false;

private:
  /// The full heading, or the short one when the full one does not fit the plot's width.
  void fitHeading();
  bool headingFits(const QString& text) const;
  class QCPItemStraightLine* m_marker = nullptr;
  QString m_heading;
  QString m_shortHeading;
  bool m_userView = false;
  bool m_fitting = false;
};
