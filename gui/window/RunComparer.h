#pragma once

#include "store/RunCompare.h"

#include "window/WindowParts.h"

#include <QObject>
#include <QString>


/// File > Compare with run…: the run shown (live or reopened) against an export, series by
/// series (core's compareRuns, as `hookscope-cli compare`): where they first diverge is said in
/// the status bar, and Go to first divergence (F8) selects that layer and series at that step.
class RunComparer : public QObject {
  Q_OBJECT

public:
  explicit RunComparer(const WindowParts& parts);
  /// Asks for an export folder and compares with it.
  void chooseAndCompare();
  /// Compares the run shown with the export at `dir`; false (with a message shown) when either
  /// cannot be compared.
  bool compareWith(const QString& dir);
  /// The relative difference that counts as a divergence (Settings: compare/tolerance, 1e-4);
  /// setting it compares the last compared run again.
  double tolerance() const { return m_tolerance; }
  void setTolerance(double tolerance);
  /// Asks for the tolerance (File > Comparison tolerance…).
  void chooseTolerance();
  /// What the status bar says of the last comparison ("" before one).
  QString summary() const { return m_summary; }
  const hookscope::RunComparison& result() const { return m_result; }
  /// Selects the first divergence's layer and series and scrubs to its step.
  void showFirstDivergence();

private:
  WindowParts m_parts;
  hookscope::RunComparison m_result;
  QString m_other;
  QString m_otherDir;  ///< the last compared run's folder
  double m_tolerance = 1e-4;
  QString m_summary;
};
