#pragma once

#include "store/RunCompare.h"

#include "window/WindowParts.h"

#include <QObject>
#include <QString>

#include <memory>

class QThread;


/// File > Compare with run…: the run shown (live or reopened) against an export, series by
/// series (core's compareRuns, as `hookscope-cli compare`): where they first diverge is said in
/// the status bar, and Go to first divergence (F8) selects that layer and series at that step.
/// The export is read on a thread of its own, under the window's memory cap (a run too large for
/// it is read at every k-th step, as reopening it would be), while the window stays usable.
class RunComparer : public QObject {
  Q_OBJECT

public:
  explicit RunComparer(const WindowParts& parts);
  ~RunComparer() override;
  /// Asks for an export folder and compares with it.
  void chooseAndCompare();
  /// Starts reading the export at `dir` to compare the run shown with it: compared() says when
  /// that is done. False (with a message shown) when nothing can be compared now (nothing
  /// captured yet, or another export still being read).
  bool compareWith(const QString& dir);
  /// The relative difference that counts as a divergence (Settings: compare/tolerance, 1e-4);
  /// setting it compares the last compared run again (from memory: it is not read again).
  double tolerance() const { return m_tolerance; }
  void setTolerance(double tolerance);
  /// Asks for the tolerance (File > Comparison tolerance…).
  void chooseTolerance();
  /// What the status bar says of the last comparison ("" before one).
  QString summary() const { return m_summary; }
  const hookscope::RunComparison& result() const { return m_result; }
  /// Selects the first divergence's layer and series and scrubs to its step.
  void showFirstDivergence();

Q_SIGNALS:
  /// A comparison compareWith() started is done: true when it was made (its summary in the status
  /// bar), false when the export could not be read or nothing is shown any more (said in a message).
  void compared(bool made);

private:
  /// The run shown against the compared run held (m_otherStore): the result, the status bar, the
  /// tree's Differs column and the plots' outlines. False when nothing is shown to compare.
  bool compareAgain();

  WindowParts m_parts;
  hookscope::RunComparison m_result;
  QString m_other;
  std::shared_ptr<hookscope::CaptureStore> m_otherStore;  ///< as it was read (also drawn by the plots)
  QString m_otherThinned;  ///< how it was read, where only some of its steps were ("" all)
  QThread* m_reading = nullptr;  ///< the thread reading an export, while one is
  double m_tolerance = 1e-4;
  QString m_summary;
};
