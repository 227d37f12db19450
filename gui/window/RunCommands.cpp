#include "window/RunCommands.h"

#include "panels/PlotsPanel.h"
#include "panels/RunControls.h"
#include "panels/StatusLine.h"
#include "session/Session.h"
#include "session/SessionHost.h"
#include "window/DiscardGuard.h"
#include "window/WindowParts.h"

using namespace hookscope;

RunCommands::RunCommands(SessionHost* sessions, RunControls* controls, PlotsPanel* plots, StatusLine* status,
                         DiscardGuard* guard, WindowCommands* window, QObject* parent)
    : QObject(parent), m_sessions(sessions), m_controls(controls), m_plots(plots), m_status(status), m_guard(guard),
      m_window(window) {}

RunConfig RunCommands::currentConfig() {
  rememberInputs();
  return m_controls->config();
}

bool RunCommands::checkInputsGiven(const RunConfig& config) {
  if (!config.inputSpecs.empty() || !config.dataFile.empty()) return true;
  Q_EMIT inputsMissing();
  m_window->showMessage(tr("No input"), tr("Type the shape of each model input into the Run tab's Inputs box (e.g. 8x1x28x28, "
                                           "or 8x128:int64:0:30000 for token ids), or choose a data file."));
  return false;
}

void RunCommands::rememberInputs() {
  const SessionView& view = m_sessions->view();
  if (view.modelFile()) m_controls->rememberInputs(view.opened().path);
}

void RunCommands::run() {
  const SessionView& view = m_sessions->view();
  if (!view.can.run) return;
  // A run (or a resumed one) shows its newest steps, also after the user scrubbed back.
  m_plots->setFollowLatest(true);
  if (view.attached()) {  // the script's own loop goes on
    m_sessions->invoke([](Session& s) { s.setPaused(false); });
    return;
  }
  const RunConfig config = currentConfig();
  if (!checkInputsGiven(config)) return;
  if (view.state.running()) {  // resumed: what the Run tab says now applies from the next step
    m_sessions->invoke([config](Session& s) { s.resume(config); });
    return;
  }
  m_status->restartRate();
  m_sessions->invoke([config, steps = m_controls->steps()](Session& s) { s.run(config, steps); });
}

void RunCommands::pause() {
  if (m_sessions->view().can.pause) m_sessions->invoke([](Session& s) { s.setPaused(true); });
}

void RunCommands::stepOnce() {
  if (!m_sessions->view().can.step) return;
  const RunConfig config = currentConfig();
  if (!m_sessions->view().attached() && !checkInputsGiven(config)) return;
  m_plots->setFollowLatest(true);  // show the step about to run, also after a break
  Q_EMIT steppingOnce();
  m_status->setBusy(true);  // a single step of a large model can take a while
  m_sessions->invoke([config](Session& s) { s.stepOnce(config); });
}

void RunCommands::stop() {
  if (m_sessions->view().state.loading) {
    m_sessions->cancelOpen();
    return;
  }
  m_sessions->invoke([](Session& s) { s.requestStop(); });
}

void RunCommands::resetWeights() {
  if (!m_sessions->view().can.reset) return;
  if (!m_guard->confirm(tr("Resetting the weights"), [this] { resetWeights(); })) return;
  m_sessions->resetWeights();
}
