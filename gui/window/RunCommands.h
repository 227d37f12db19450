#pragma once
// Run > Run, Pause, Step, Stop and Reset weights, with what they need of the Run tab: each asks
// the published view whether the open session can do it now, and sends it through invoke().

#include "common/RunConfig.h"

#include <QObject>

class DiscardGuard;
class PlotsPanel;
class RunControls;
class SessionHost;
class StatusLine;
class WindowCommands;

class RunCommands : public QObject {
  Q_OBJECT

public:
  /// Problems are shown through `window`; a reset first asks `guard` about captures not exported.
  RunCommands(SessionHost* sessions, RunControls* controls, PlotsPanel* plots, StatusLine* status, DiscardGuard* guard,
              WindowCommands* window, QObject* parent);

  /// Runs the Run tab's steps; resumes a paused run (a model file with the Run tab as it is now).
  void run();
  void pause();
  /// Exactly one step, also while paused.
  void stepOnce();
  /// Ends the run after the step in progress (an attached script: detaches it), or gives up
  /// opening a model.
  void stop();
  /// Opens the model file again: fresh weights, the same hooks.
  void resetWeights();
  /// Keeps the Run tab's inputs for the model file open, to show again when it is reopened.
  void rememberInputs();

Q_SIGNALS:
  /// The Run tab has no input to run with: it should be shown (the window says where to type them).
  void inputsMissing();
  /// One step is about to run: "Paused at step 7 on …" is over.
  void steppingOnce();

private:
  hookscope::RunConfig currentConfig();
  /// False, with a message saying where to type them, when the run has no inputs.
  bool checkInputsGiven(const hookscope::RunConfig& config);

  SessionHost* m_sessions;
  RunControls* m_controls;
  PlotsPanel* m_plots;
  StatusLine* m_status;
  DiscardGuard* m_guard;
  WindowCommands* m_window;
};
