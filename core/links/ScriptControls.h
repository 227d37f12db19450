#pragma once
// What HookScope asks of one attached process, kept whole: each module's hooks, the
// interventions on its gradients and outputs, and the log of when each was in force. Plain
// data: its owner (ScriptLink) locks it and sends the message it makes.

#include "common/ModelTypes.h"
#include "files/ExportManifest.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hookscope {

class ScriptControls {
public:
  /// For a process whose tree is `modules` (paths name the modules in messages).
  void setModules(const std::vector<ModuleInfo>& modules);

  /// A module's hook mask (bits of kindBit); false when it is out of range or unchanged.
  bool setHooks(int module, std::uint8_t mask);
  /// Every module's mask; false when `masks` does not fit the tree.
  bool setAllHooks(const std::vector<std::uint8_t>& masks);
  const std::vector<std::uint8_t>& hooks() const { return m_hooks; }
  /// From step `step` on; false when the module is out of range.
  bool setGradientIntervention(int module, GradientIntervention intervention, std::int64_t step);
  /// From step `step` on; false for the root (its output is the loss's input) or out of range.
  bool setOutputIntervention(int module, OutputIntervention intervention, std::int64_t step);
  /// The interventions in force over the link; one still in force ends at `stepsDone - 1`.
  std::vector<InterventionRecord> interventions(std::int64_t stepsDone) const;

  /// The message that tells the process all of it ("welcome" or "hooks", docs/protocol.md),
  /// with whether steps wait to be checked (`sync`), the histogram's bins and the pause.
  std::string message(const char* type, bool sync, int bins, bool paused) const;

private:
  std::vector<std::string> m_paths;
  std::vector<std::uint8_t> m_hooks;
  std::map<int, GradientIntervention> m_gradientOps;
  std::map<int, OutputIntervention> m_outputOps;
  std::vector<InterventionRecord> m_log;
};

} // namespace hookscope
