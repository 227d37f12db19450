#pragma once

#include "PlotPage.h"

class QComboBox;

/// The loss over steps, or another per-step scalar (lr, or what a script passes to hs.step).
class LossPlot : public PlotPage {
  Q_OBJECT

public:
  explicit LossPlot(QWidget* parent = nullptr);
  void refresh(const ViewState& state) override;
  QString toCsv() const override;
  int pointCount() const;
  /// The scalar drawn ("loss" unless chosen otherwise).
  QString scalar() const { return m_name; }
  /// Draws another scalar; its name must be one the store holds to show anything.
  void setScalar(const QString& name);

protected:
  void fitAxes() override;

private:
  void updateChoices(const std::vector<std::string>& names);

  QComboBox* m_chooser;
  QString m_name = QStringLiteral("loss");
  std::uint64_t m_version = 0;
};
