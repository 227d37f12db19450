#pragma once
// Where the open session is, as one value: emitted whole when any part of it changes, read by
// the window for what it shows and which actions it allows.

#include <QMetaType>

struct RunState {
  enum class Phase { Idle, Running, Paused };
  Phase phase = Phase::Idle;
  bool loading = false;        ///< a model file is being opened (the open session stays until it is)
  bool engineStopped = false;  ///< the open model file's engine process ended by itself
  qint64 stepsDone = 0;        ///< steps the open session has finished
  qint64 enginePid = -1;       ///< the process running the open model file (-1: none)

  /// A run is on: stepping, or paused in the middle of it (an attached script: attached).
  bool running() const { return phase != Phase::Idle; }
  bool paused() const { return phase == Phase::Paused; }
  bool operator==(const RunState& o) const {
    return phase == o.phase && loading == o.loading && engineStopped == o.engineStopped &&
           stepsDone == o.stepsDone && enginePid == o.enginePid;
  }
  bool operator!=(const RunState& o) const { return !(*this == o); }
};

Q_DECLARE_METATYPE(RunState)

/// Registers the session's value types for queued signals; call once before connecting.
void registerSessionTypes();
