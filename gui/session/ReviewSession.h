#pragma once
// A run reopened from its export folder, or a checkpoint's weights captured once: read-only.
// Nothing runs; its captures can be looked at and exported again as they were.

#include "session/Session.h"

#include "files/ExportFolder.h"

#include <limits>
#include <memory>

class ReviewSession : public Session {
  Q_OBJECT

public:
  /// Reads the export in `dir`; with `checkpoint`, the export holds that checkpoint's weights (one
  /// step of param series) and is shown as the checkpoint: its path, name, parameter counts.
  /// Null with why (`error`) when the export cannot be read.
  /// capBytes: the memory its captures may take (the window's cap): a larger export is read at
  /// every k-th step, which the window's status line and the opening message say.
  static std::unique_ptr<ReviewSession> open(const QString& dir, const QString& checkpoint, QString* error,
                                             std::size_t capBytes = std::numeric_limits<std::size_t>::max());

  /// A checkpoint's weights, or a run's export.
  SessionKind kind() const override { return m_checkpoint ? SessionKind::Checkpoint : SessionKind::Export; }
  QString exportTo(const QString& dir, bool overwrite, const QString& interrupted) override;

private:
  ReviewSession(SessionSummary summary, hookscope::ExportData data, bool checkpoint);

  hookscope::ExportManifest m_manifest;
  std::vector<hookscope::Alert> m_alerts;
  bool m_checkpoint = false;
};
