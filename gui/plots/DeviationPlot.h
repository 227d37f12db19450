#pragma once

#include "plots/PlotPage.h"
#include "plots/StoreFollower.h"

#include <map>

#include <string>
#include <vector>

class QCPColorMap;
class QCPColorScale;
class QCPItemRect;
class QCPItemText;

/// Every hooked layer against its own band, step by step (issue 49): one row a layer in the
/// model's order, the step on x, and as colour how far the layer's furthest statistic lies from
/// its band (sigmas, store/BandTracker.h): the wave of a spike through the network in one
/// picture. The selected layer's row is outlined.
class DeviationPlot : public PlotPage {
  Q_OBJECT

public:
  explicit DeviationPlot(QWidget* parent = nullptr);
  /// The model's modules in order: the rows' order.
  void setModuleOrder(std::vector<std::string> order);
  void resetView() override;
  void refresh(const ViewState& state) override;
  /// Draws what the store holds now even while hidden (Export plots writes every page).
  void drawNow(const ViewState& state);
  QString toCsv() const override;
  /// The rows drawn (module paths, top first) and a cell's value (NaN: not scored).
  const std::vector<std::string>& rows() const { return m_rows; }
  double cell(int row, int column) const;
  int columnCount() const { return m_columns; }
  /// The column holding `step` (-1: none).
  int columnOf(std::int64_t step) const;
  /// The sigma the colour bar's top stands for.
  static constexpr double kTopSigma = 12;

protected:
  void fitAxes() override;

private:
  void redraw(const ViewState& state);
  /// Reads the points new since the last read (all of them again for another store, a thinning
  /// or another rank).
  void readNew(const ViewState& state, bool rankChanged);
  bool isStale(const ViewState& state) const;

  /// A layer's furthest score at each step (NaN: none), from step `base` on.
  struct Row {
    std::int64_t base = 0;
    std::vector<float> scores;
    void keep(std::int64_t step, float score);
  };
  void labelRows();

  QCPColorMap* m_map;
  QCPColorScale* m_scale;
  QCPItemRect* m_selected;
  QCPItemText* m_note;
  std::vector<std::string> m_order;
  std::vector<std::string> m_rows;
  std::vector<double> m_cells;  ///< row-major: m_rows × m_columns, |sigma| (NaN: none)
  std::vector<std::int64_t> m_columnSteps;  ///< the first step of each column
  int m_columns = 0;
  const hookscope::CaptureStore* m_drawnStore = nullptr;
  std::uint64_t m_drawnVersion = 0;
  int m_drawnRank = -2;
  StoreFollower m_follower;  ///< the store read, to read it all again after a thinning
  std::map<hookscope::SeriesKey, std::int64_t> m_read;  ///< the last step read of each series
  std::map<std::string, Row> m_scores;                  ///< by module
  std::vector<std::string> m_seenOrder;                 ///< modules as first read (those not in m_order)
  bool m_forced = false;  ///< drawNow: draw although hidden
  int m_labelled = -1;  ///< every how many rows the axis names one (-1: not yet)
  int m_selectedRow = -1;  ///< the selected layer's row, always named (-1: none)
  int m_labelledSelection = -1;  ///< the selected row when the rows were last named
  int m_labelWidth = 0; ///< the widest a name may be drawn
};
