#include "session/Session.h"

void registerSessionTypes() {
  qRegisterMetaType<SessionSummary>();
  qRegisterMetaType<StepSummary>();
  qRegisterMetaType<RunState>();
  qRegisterMetaType<SessionView>();
  qRegisterMetaType<hookscope::RunConfig>();
}

Session::Session(SessionSummary summary) : m_summary(std::move(summary)) {}

Session::~Session() = default;

RunState Session::state() const {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  return m_state;
}

SessionAbilities Session::abilities(const RunState& state) const {
  SessionAbilities can;
  can.stop = state.running();
  can.exportCaptures = m_summary.store != nullptr;
  can.open = can.attach = !state.running();
  return can;
}

void Session::setHooks(const std::vector<std::uint8_t>&) {}
void Session::setGradientIntervention(int, hookscope::GradientIntervention) {}
void Session::setOutputIntervention(int, hookscope::OutputIntervention) {}
void Session::run(const hookscope::RunConfig&, qint64) {}
void Session::stepOnce(const hookscope::RunConfig&) {}
void Session::resume(const hookscope::RunConfig&) {}
void Session::setPaused(bool) {}
void Session::requestStop() {}
void Session::setBreakRules(quint32) {}
void Session::setRuleSettings(const hookscope::RuleSettings&) {}
void Session::setStepTimeLimit(int) {}

void Session::setMemoryCap(std::size_t bytes) {
  if (m_summary.store) m_summary.store->setCapBytes(bytes);
}
