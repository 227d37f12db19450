#pragma once

#include "plots/ViewState.h"

#include <QWidget>

#include <map>
#include <set>

class DeviationPlot;
class GradNormPlot;
class HeatmapPlot;
class HistogramPlot;
class LossPlot;
class PlotPage;
class PrecisionPlot;
class QTabWidget;
class QCheckBox;
class QComboBox;
class QLabel;
class QSlider;
class QSplitter;

/// The plots, the series chooser of the selected layer, and the step slider that scrubs
/// every plot back to an earlier step or follows the latest.
class PlotsPanel : public QWidget {
  Q_OBJECT

public:
  explicit PlotsPanel(QWidget* parent = nullptr);

  void setStore(std::shared_ptr<hookscope::CaptureStore> store);
  /// Selects the layer whose histogram and heatmap are shown.
  void setSelectedModule(const std::string& path, const std::string& type = {});
  const std::string& selectedModule() const { return m_module; }
  /// Shows the selected layer's first series of this kind (the first call's, the first tensor's),
  /// when it has one: what a rule fired on.
  void showKind(hookscope::CaptureKind kind);
  /// What is ticked on the selected layer, so that an empty plot can say why it is empty.
  void setSelectedHooks(std::uint8_t mask);
  /// The newest step that finished: the one shown while following, so that a step whose
  /// captures are still arriving is not shown half-filled. -1: the store's newest step.
  void setFinishedStep(std::int64_t step) { m_finishedStep = step; }
  /// Redraws everything from the store (called by the window's coalescing timer).
  void refresh();
  /// Shows this step in every plot; following stops until followLatest(true).
  void scrubTo(std::int64_t step);
  void setFollowLatest(bool follow);
  bool followsLatest() const;
  std::int64_t shownStep() const { return m_state.step; }
  /// The series the histogram and heatmap show.
  const hookscope::SeriesKey& selectedSeries() const { return m_state.selected; }
  /// Scrubs `delta` steps back (negative) or forward from the step shown.
  void stepBy(std::int64_t delta);
  /// The step label under the plots ("12 of 299").
  QString stepText() const;
  /// Shows one rank of a job (-1: all ranks); the rank chooser appears once the store holds
  /// more than one rank.
  void setRank(int rank);
  int rank() const { return m_state.rank; }
  int shownRank() const { return m_state.shownRank(); }
  /// A word after the rank's name in the chooser ("lost", "left"); empty to clear.
  void setRankNote(int rank, const QString& note);
  QComboBox* rankChooser() const { return m_rankChooser; }

  HistogramPlot* histogram() const { return m_histogram; }
  HeatmapPlot* heatmap() const { return m_heatmap; }
  GradNormPlot* gradNorms() const { return m_gradNorms; }
  LossPlot* loss() const { return m_loss; }
  /// Draws `run` over the shown one (the histogram's outline, the loss dashed); null: none.
  void setComparedStore(std::shared_ptr<hookscope::CaptureStore> run);
  PrecisionPlot* precision() const { return m_precision; }
  /// Beside the histogram: the selected series' distribution over steps, or its low-precision
  /// counts (the tabs under them).
  void showPrecision(bool precision);
  bool showsPrecision() const;
  /// The third tab: every layer against its own band over steps (issue 49).
  void showDeviation();
  bool showsDeviation() const;
  DeviationPlot* deviation() const { return m_deviation; }
  /// The model's modules in order: the deviation view's rows, the gradient norms' colours.
  void setModuleOrder(std::vector<std::string> order);
  QList<PlotPage*> pages() const;
  /// Writes each page as PNG, PDF and CSV into `dir`; the titles of those that could not be written.
  QStringList saveAll(const QString& dir) const;

Q_SIGNALS:
  void moduleClicked(const QString& path);
  /// The user scrubbed to another step or chose another rank: what shows the step elsewhere
  /// (the tree's numbers) follows.
  void shownChanged();

protected:
  bool eventFilter(QObject* watched, QEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;

private:
  /// The pages: the histogram and, in tabs, the distribution or precision over steps above; the
  /// gradient norms and the loss below.
  QSplitter* buildGrid();
  /// The deviation view, shown, gets at least half the top row; where that is too narrow to name
  /// its rows (a 1024 px window left it ~190 px), the histogram's statistics step aside for it.
  void fitTopRow();
  void updateSeriesChoices();
  /// The series shown when a layer is selected: see updateSeriesChoices.
  int defaultSeries() const;
  void applySeriesChoice();
  /// Brings the rank chooser up to the store's ranks.
  void updateRankChoices();

  std::string m_module;
  ViewState m_state;
  std::int64_t m_finishedStep = -1;
  std::vector<hookscope::SeriesKey> m_choices;
  std::set<hookscope::SeriesKey> m_sharded;  ///< the shown rank's series of tensors that have a whole
  HistogramPlot* m_histogram;
  HeatmapPlot* m_heatmap;
  GradNormPlot* m_gradNorms;
  LossPlot* m_loss;
  PrecisionPlot* m_precision;
  DeviationPlot* m_deviation;
  QTabWidget* m_overSteps;
  QSplitter* m_top = nullptr;  ///< the histogram beside the over-steps tabs
  QComboBox* m_series;
  QComboBox* m_rankChooser;
  QLabel* m_rankLabel;
  std::map<int, QString> m_rankNotes;
  QSlider* m_slider;
  QCheckBox* m_follow;
  QLabel* m_stepLabel;
};
