#pragma once

#include "store/Bands.h"

#include "window/WindowParts.h"

#include <QElapsedTimer>
#include <QObject>
#include <QString>
#include <QTimer>


/// Where the loss's spike started (issues 49, 57): whenever the run shown (live, attached or
/// reopened) has a loss that left its own band, the series whose excursion began from 8 steps
/// before it are ranked as `hookscope-cli explain` ranks them (the same code, on the scores the
/// store kept); with no loss spike, the layers that left their band all the same. The status
/// bar names the first, the tree's "Left its band at" column gives each module's step, and Go
/// to first mover (F9) selects it at the step its excursion began.
class SpikeFinder : public QObject {
  Q_OBJECT

public:
  explicit SpikeFinder(const WindowParts& parts);
  /// Looks at the store again (the timer calls it twice a second; a test calls it at once).
  void check();
  /// What the status bar says of the spike ("" while the loss stayed in its band).
  QString summary() const { return m_summary; }
  const hookscope::FirstMovers& result() const { return m_result; }
  /// Selects the first mover's layer and series at the step its excursion began.
  void showFirstMover();

private:
  void reset();
  /// The first mover, or with no loss spike the first layer that left its band; null: none.
  const hookscope::BandMover* firstMover() const;

  static constexpr qint64 kUnfollowedEveryMs = 5000;

  WindowParts m_parts;
  QTimer m_timer;
  const hookscope::CaptureStore* m_store = nullptr;
  std::uint64_t m_version = 0;
  std::int64_t m_explained = -1;   ///< the loss step last explained
  hookscope::FirstMovers m_result;
  QString m_summary;
  QElapsedTimer m_sinceUnfollowed;  ///< since the no-spike findings were last looked for
};
