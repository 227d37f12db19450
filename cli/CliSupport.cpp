#include "CliSupport.h"

#include "CliCommands.h"

#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <iostream>

namespace hookscope::cli {

namespace {

std::atomic<int> g_stopSignal{0};

void onStopSignal(int signo) {
  if (g_stopSignal.exchange(signo) != 0) {
    ::signal(signo, SIG_DFL);
    ::raise(signo);
  }
}

} // namespace

int error(int code, const std::string& message) {
  std::cerr << "hookscope-cli: " << message << "\n";
  return code;
}

void note(const std::string& message) { std::cerr << "hookscope-cli (note): " << message << "\n"; }

struct StopSignals::Saved {
  struct sigaction interrupt {}, terminate {};
};

StopSignals::StopSignals() : m_saved(new Saved) {
  struct sigaction action {};
  action.sa_handler = onStopSignal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, &m_saved->interrupt);
  ::sigaction(SIGTERM, &action, &m_saved->terminate);
}

StopSignals::~StopSignals() {
  ::sigaction(SIGINT, &m_saved->interrupt, nullptr);
  ::sigaction(SIGTERM, &m_saved->terminate, nullptr);
  delete m_saved;
}

int StopSignals::received() { return g_stopSignal.load(); }

std::string StopSignals::name(int signo) { return signo == SIGINT ? "SIGINT" : "SIGTERM"; }

std::unique_ptr<ExportLock> holdExportFolder(const std::string& out, bool force) {
  for (const auto& line : recoverInterruptedWrites(out)) note(line);
  if (std::string problem = checkExportTarget(out, force); !problem.empty()) {
    error(kOutput, problem);
    return nullptr;
  }
  std::string message;
  auto lock = ExportLock::acquire(out, &message);
  if (!lock) error(kOutput, message);
  return lock;
}

bool splitAssignment(const std::string& spec, std::string* name, double* value) {
  const auto eq = spec.rfind('=');
  if (eq == std::string::npos) return false;
  char* end = nullptr;
  *value = std::strtod(spec.c_str() + eq + 1, &end);
  *name = spec.substr(0, eq);
  return end && *end == '\0';
}

bool parseRuleOptions(const std::vector<std::string>& breakNames, const std::vector<std::string>& thresholds,
                      std::set<RuleKind>* breakOn, RuleSettings* settings, std::string* message) {
  for (const auto& name : breakNames) {
    const auto rule = parseRuleName(name);
    if (!rule) {
      *message = "unknown --break rule '" + name + "'; use non_finite, exploding_gradient, "
                 "vanishing_gradient, dead_units, saturation, update_ratio or loss_plateau";
      return false;
    }
    breakOn->insert(*rule);
  }
  for (const auto& spec : thresholds) {
    std::string name;
    double value = 0;
    const bool assignment = splitAssignment(spec, &name, &value);
    const auto rule = parseRuleName(name);
    if (!assignment || !rule) {
      *message = "--threshold '" + spec + "' needs RULE=VALUE with a rule name and a number";
      return false;
    }
    if (!setRuleThreshold(*settings, *rule, value, message)) return false;
  }
  return true;
}

} // namespace hookscope::cli
