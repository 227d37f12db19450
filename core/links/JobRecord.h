#pragma once
// What a job recorded, gathered from its ranks at one moment, for the window and the export:
// every rank's alerts and the job's own, gaps, interventions, the scripts and how each ended,
// and the manifest made of them.

#include "files/ExportManifest.h"
#include "links/JobRank.h"
#include "store/CaptureStore.h"

#include <map>
#include <string>
#include <vector>

namespace hookscope {

class JobRecord {
public:
  /// Gathers it from `ranks` (the job's lock held) and the job's own alerts.
  JobRecord(const JobRanks& ranks, const std::vector<Alert>& jobAlerts);

  /// Every rank's alerts and the job's, by the step they first fired at.
  const std::vector<Alert>& alerts() const { return m_alerts; }
  /// Every rank's gaps (a gap's captures are that rank's).
  const std::vector<GapRecord>& gaps() const { return m_gaps; }
  const std::vector<InterventionRecord>& interventions() const { return m_interventions; }
  /// Each rank's script, with how its link ended and its steps.
  const std::vector<ScriptRecord>& scripts() const { return m_scripts; }

  /// The export's manifest: the scripts (every rank when it is a job of several), steps, every
  /// module with its output `shapes` and those `masks` hooks, interventions, gaps, `bins` and the
  /// store's thinning.
  ExportManifest manifest(const CaptureStore& store, const std::vector<ModuleInfo>& modules,
                          const std::map<std::string, std::vector<std::string>>& shapes,
                          const std::vector<std::uint8_t>& masks, int bins) const;
  /// A manifest told as a model file's, with the configurations of `configHistory` it stepped
  /// with (a record still open, toStep -1, ends at the last step; one from after it is left out).
  static ExportManifest asModelFile(ExportManifest manifest, const std::string& modelFile, const std::string& sha256,
                                    const std::vector<ConfigRecord>& configHistory);

private:
  std::vector<Alert> m_alerts;
  std::vector<GapRecord> m_gaps;
  std::vector<InterventionRecord> m_interventions;
  std::vector<ScriptRecord> m_scripts;
};

} // namespace hookscope
