#pragma once

#include "plots/LayerColours.h"
#include "plots/PlotPage.h"
#include "plots/StoreFollower.h"

#include <QVector>

class QCPColorScale;
class QCPGraph;

class LineBundle;

/// Gradient norm of every hooked layer over steps, one line each, log scale by default.
/// Clicking a line or its legend entry selects that layer; hovering shows the value.
/// A job's ranks: one rank's lines, or with all ranks a line per rank and layer (a layer's
/// ranks share its color), or when ranks are many the median over ranks per layer with the
/// selected layer's min–max band.
class GradNormPlot : public PlotPage {
  Q_OBJECT

public:
  explicit GradNormPlot(QWidget* parent = nullptr);
  void refresh(const ViewState& state) override;
  QString toCsv() const override;
  bool legendShown() const;
  /// With more layers than the plot's legend shows, the file gets a legend of its own under the
  /// plot: every line's colour and layer.
  bool savePng(const QString& path) const override;
  /// The layers drawn, each once, with their lines' colour: what the legend names.
  std::vector<std::pair<QString, QColor>> legendEntries() const;
  /// Another store: the layers' colours are handed out afresh.
  void resetView() override;
  /// The colour of a layer's line (LayerColours: its own while few, else its place in the
  /// model, on the scale shown beside the plot).
  QColor layerColor(const hookscope::SeriesKey& key) const;
  /// The model's modules in order (the tree's): what "where a layer sits" means.
  void setModuleOrder(std::vector<std::string> order);
  /// Whether the lines' colours say each layer's place in the model, with the scale shown.
  bool coloursByPlace() const { return m_placeScale != nullptr; }
  /// Lines drawn, and the points of the line for one module (call 0, index 0).
  int lineCount() const;
  /// Layers drawn whose every gradient norm is 0 (a vanished gradient, often float32's
  /// underflow): a log axis draws none of their points, so the heading says how many.
  int zeroLayerCount() const { return m_zeroLayers; }
  /// The compared run's lines (dashed, one per layer in the layer's colour) and the points of
  /// one module's (call 0, index 0).
  int comparedLineCount() const;
  int comparedPointCount(const std::string& module) const;
  int pointCount(const std::string& module) const;
  /// How the ranks of a job are drawn.
  enum class RankMode { OneRank, LinePerRank, Median };
  RankMode rankMode() const { return m_mode; }
  /// The min–max band drawn (Median mode, a layer selected): its points' low and high values.
  QVector<double> bandLow() const;
  QVector<double> bandHigh() const;
  /// The values of line `line` (as drawn) and the key it draws.
  QVector<double> lineValues(int line) const;
  hookscope::SeriesKey lineKey(int line) const { return m_keys[std::size_t(line)]; }
  /// The colour line `line` is drawn in (a legend drawn elsewhere: the report's).
  QColor drawnColor(int line) const;

Q_SIGNALS:
  void moduleClicked(const QString& path);

protected:
  void fitAxes() override;
  void addMenuActions(QMenu* menu) override;
  void logScaleChanged() override;

private:
  /// The corner where a legend of `size` covers the fewest points of the lines.
  Qt::Alignment clearestCorner(const QSize& size) const;
  /// Shows the legend when it fits in a corner and the user has not hidden it, in the corner
  /// that covers the lines least.
  void placeLegend();
  void onMouseMove(QMouseEvent* event);
  void highlight(const std::string& module);
  /// Brings the lines up to the store: appends new steps, or reloads after a thinning.
  void updateLines(const ViewState& state);
  /// The layers' colours for `layers`, and the scale beside the plot while they say places.
  void colourByPlace(const std::vector<hookscope::SeriesKey>& layers);
  /// The series drawn: every layer's gradient of the rank shown, of every rank, or one per layer.
  static std::vector<hookscope::SeriesKey> linesOf(const ViewState& state, RankMode mode);
  /// The legend's entries (one per layer, while few) and the band's two edges, for m_keys.
  void rebuildGraphs();
  /// Every line read again from the store, in its layer's colour (a rank a shade apart).
  void reloadLines();
  /// Counts the layers whose lines hold only zeros and says so in the heading on a log axis.
  void sayZeroLayers();
  void emitClicked(int series);
  /// Median mode: brings the median lines and bands up to the store.
  void updateSpread(const ViewState& state);
  /// Shows the band of the highlighted layer (Median mode).
  void updateBand();
  /// Draws the compared run's norms of the layers drawn (one rank shown), or none.
  void updateCompared(const ViewState& state);

  LineBundle* m_lines;
  LineBundle* m_compared;  ///< the compared run's norms, dashed; not clickable
  const hookscope::CaptureStore* m_comparedDrawn = nullptr;
  std::uint64_t m_comparedVersion = 0;  ///< the shown run's version when they were drawn
  QCPGraph* m_bandLow = nullptr;
  QCPGraph* m_bandHigh = nullptr;
  QCPGraph* m_comparedEntry = nullptr;  ///< the legend's "compared run (dashed)", while one is drawn
  RankMode m_mode = RankMode::OneRank;
  int m_rankCount = 1;
  struct Band {
    QVector<double> steps, low, high;
  };
  std::vector<Band> m_bands;                 ///< Median mode: per line
  std::vector<char> m_lineNonZero;           ///< per line: a norm other than 0 appended since its reload
  int m_zeroLayers = 0;
  std::vector<std::string> m_legendModules;  ///< the module each legend entry names
  std::uint64_t m_version = 0;
  StoreFollower m_follower;
  std::vector<hookscope::SeriesKey> m_keys;  ///< one per line, same order (rank -1: the median over ranks)
  std::string m_highlighted;
  mutable LayerColours m_colours;           ///< layerColor(): hands out the palette as lines come
  QCPColorScale* m_placeScale = nullptr;    ///< beside the plot while colours say places
  bool m_legendWanted = true;  ///< the user's choice (right-click menu)
  std::size_t m_layerCount = 0;  ///< lines drawn, one per layer (and call, tensor)
};
