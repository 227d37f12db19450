#pragma once

#include "PlotPage.h"

/// The loss over steps.
class LossPlot : public PlotPage {
  Q_OBJECT

public:
  explicit LossPlot(QWidget* parent = nullptr);
  void refresh(const ViewState& state) override;
  QString toCsv() const override;
  int pointCount() const;

private:
  std::uint64_t m_version = 0;
};
