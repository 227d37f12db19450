#pragma once

#include "PlotPage.h"
#include "StoreFollower.h"

#include <QVector>

class LineBundle;

/// Gradient norm of every hooked layer over steps, one line each, log scale by default.
/// Clicking a line or its legend entry selects that layer; hovering shows the value.
class GradNormPlot : public PlotPage {
  Q_OBJECT

public:
  explicit GradNormPlot(QWidget* parent = nullptr);
  void refresh(const ViewState& state) override;
  QString toCsv() const override;
  void setLogScale(bool on);
  bool logScale() const { return m_log; }
  bool legendShown() const;
  /// Lines drawn, and the points of the line for one module (call 0, index 0).
  int lineCount() const;
  int pointCount(const std::string& module) const;

Q_SIGNALS:
  void moduleClicked(const QString& path);

protected:
  void fitAxes() override;
  void addMenuActions(QMenu* menu) override;

private:
  /// Shows the legend when it fits in a corner and the user has not hidden it.
  void placeLegend();
  void onMouseMove(QMouseEvent* event);
  void highlight(const std::string& module);
  /// Brings the lines up to the store: appends new steps, or reloads after a thinning.
  void updateLines(const ViewState& state);
  void emitClicked(int series);

  LineBundle* m_lines;
  std::uint64_t m_version = 0;
  StoreFollower m_follower;
  std::vector<hookscope::SeriesKey> m_keys;  ///< one per line, same order; legend graphs too
  std::string m_highlighted;
  bool m_log = true;
  bool m_legendWanted = true;  ///< the user's choice (right-click menu)
};
