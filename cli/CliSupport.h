#pragma once
// What the commands of hookscope-cli share: messages, stop signals, rule options.

#include "ExportTarget.h"
#include "RuleEngine.h"

#include <memory>

#include <set>
#include <string>
#include <vector>

namespace hookscope::cli {

/// Prints "hookscope-cli: MESSAGE" to standard error; returns `code`.
int error(int code, const std::string& message);
/// Prints "hookscope-cli (note): MESSAGE" to standard error.
void note(const std::string& message);

/// While alive: the first SIGINT or SIGTERM is recorded for the command to stop after its
/// current step and write what it has; a second one ends the process at once, as the signal
/// would have.
class StopSignals {
public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  /// The signal received, or 0.
  static int received();
  /// "SIGINT" or "SIGTERM".
  static std::string name(int signo);

private:
  struct Saved;
  Saved* m_saved;
};

/// Before a run: tidies interrupted writes in `out` (noting each), checks that an export may be
/// written there and locks it, so a run never ends in "cannot write". Null after reporting why.
std::unique_ptr<ExportLock> holdExportFolder(const std::string& out, bool force);

/// Splits "NAME=NUMBER" at its last '='; false unless a whole number follows it.
bool splitAssignment(const std::string& spec, std::string* name, double* value);

/// Parses --break rule names and --threshold RULE=VALUE; false with a usage message.
bool parseRuleOptions(const std::vector<std::string>& breakNames, const std::vector<std::string>& thresholds,
                      std::set<RuleKind>* breakOn, RuleSettings* settings, std::string* message);

} // namespace hookscope::cli
