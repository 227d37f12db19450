// hookscope-cli show: what an export folder holds, read without LibTorch.

#include "cli/CliCommands.h"
#include "cli/CliSupport.h"
#include "common/CheckedMath.h"
#include "common/CsvFormat.h"
#include "files/ExportFolder.h"
#include "common/PrintableText.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <iomanip>
#include <iterator>
#include <map>
#include <set>
#include <iostream>
#include <sstream>

namespace hookscope::cli {

namespace {

// The attached script (and the ranks of its job) an export came from, and what it dropped.
void describeScript(std::ostringstream& out, const ExportManifest& m) {
  const auto& script = *m.script;
  out << "  script:   " << script.describe() << "\n"
      << "  created:  " << m.createdUtc << " by HookScope " << m.hookscopeVersion << "\n"
      << "  run:      " << m.steps << " steps, attached; " << script.ended << "\n";
  if (!m.ranks.empty()) {
    out << "  job:      " << m.ranks.size() << " ranks of world size " << m.ranks.front().worldSize
        << (m.ranks.front().job.empty() ? "" : " (job " + m.ranks.front().job + ")") << "\n";
    for (const auto& r : m.ranks) {
      out << "    rank " << r.rank << ": pid " << r.pid << " on " << r.host << ", " << r.steps << " steps; " << r.ended
          << "\n";
    }
  }
  const std::int64_t dropped = m.droppedCaptures();
  if (!dropped) return;
  out << "  gaps:     " << dropped << " captures dropped by the script in " << m.gaps.size() << " steps\n";
  // Which series lost which steps, and why (the first few; manifest.json has every named one).
  std::map<std::string, std::vector<std::int64_t>> lost;
  for (const auto& gap : m.gaps) {
    for (const auto& s : gap.series) {
      const std::string name = (s.key.module.empty() ? "(root)" : s.key.module) + " " + captureKindName(s.key.kind) +
                               " call " + std::to_string(s.key.call) + " index " + std::to_string(s.key.index) +
                               (m.ranks.size() > 1 ? " rank " + std::to_string(gap.rank) : "") + ": " + s.reason;
      lost[name].push_back(gap.step);
    }
  }
  int shown = 0;
  for (const auto& [name, steps] : lost) {
    if (++shown > 8) {
      out << "            … and " << lost.size() - 8 << " more series (manifest.json, gaps)\n";
      break;
    }
    out << "            " << printableText(name, false) << " (" << steps.size() << " steps, first " << steps.front()
        << ")\n";
  }
}

// What the export holds: its source, captures, thinning, loss and format.
void describeRun(std::ostringstream& out, const ExportData& data) {
  const auto& m = data.manifest;
  const auto& store = *data.store;
  if (m.script) {
    describeScript(out, m);
  } else {
    out << "  model:    " << m.modelFile << " (sha256 " << m.modelSha256.substr(0, 16) << "...)\n"
        << "  created:  " << m.createdUtc << " by HookScope " << m.hookscopeVersion << "\n"
        << "  run:      " << m.steps << " steps, " << m.config.describe() << "\n";
  }
  out << "  hooked:   " << m.hooked.size() << " modules\n"
      << "  captures: " << store.captureCount() << " in " << store.seriesKeys().size() << " series, "
      << store.steps().size() << " steps kept\n";
  if (!m.interrupted.empty()) {  // step numbers are the export's own: the last kept is steps - 1
    out << "  interrupted: by " << m.interrupted
        << (m.steps > 0 ? " after step " + std::to_string(m.steps - 1) + " (" + std::to_string(m.steps) + " steps)"
                        : std::string(" before its first step"))
        << "\n";
  }
  if (m.thinned()) {
    out << "  thinned:  yes, " << m.thinning.size() << " times to stay under " << m.memoryCapBytes / (1024 * 1024)
        << " MiB: every " << m.thinning.back().stride << " steps kept";
    if (m.thinning.back().callStride > 1) {
      out << ", and of each module's calls within a step every " << m.thinning.back().callStride;
    }
    out << "\n";
  } else {
    out << "  thinned:  no\n";
  }
  if (data.hasTensors) out << "  tensors:  tensors.pt holds full activation tensors\n";
  const auto ranks = store.ranks();
  for (const int rank : ranks) {
    const auto losses = store.scalars("loss", rank);
    if (losses.empty()) continue;
    out << "  loss:     " << formatDouble(losses.front().value) << " at step " << losses.front().step << " -> "
        << formatDouble(losses.back().value) << " at step " << losses.back().step
        << (ranks.size() > 1 ? " (rank " + std::to_string(rank) + ")" : "") << "\n";
  }
  out << "  format:   version " << m.version
      << (m.version == 1 ? " (before ranks)" : m.version == 2 ? " (before the low-precision counts)" : "") << "\n";
}

// What float16 and fp8 would lose: the largest fraction of a tensor over the series' steps
// (docs/export-format.md), "-" where the source did not measure it.
std::string worstFraction(const std::vector<SeriesPoint>& points, std::int64_t TensorStats::*count) {
  double worst = -1;
  for (const auto& p : points) {
    if (p.stats.hasPrecision() && p.stats.numel > 0) worst = std::max(worst, double(p.stats.*count) / double(p.stats.numel));
  }
  if (worst < 0) return "-";
  if (worst == 0) return "0";
  std::ostringstream text;
  text << std::setprecision(2) << worst * 100 << "%";
  return text.str();
}

// A series has a gap at a step its rank kept but it lacks, between its first and last point (a
// hook ticked later is not a gap), or where the script said it dropped the capture.
class GapFinder {
public:
  GapFinder(const CaptureStore& store, const ExportManifest& m) {
    for (const auto& key : store.seriesKeys()) {
      for (const auto& p : store.series(key)) m_rankSteps[key.rank].insert(p.step);
    }
    for (const auto& gap : m.gaps) {
      for (const auto& s : gap.series) {
        SeriesKey key = s.key;
        key.rank = gap.rank;
        m_dropped[key].insert(gap.step);
      }
    }
  }

  std::string describe(const SeriesKey& key, const std::vector<SeriesPoint>& points) {
    std::set<std::int64_t> missing = m_dropped[key];
    std::set<std::int64_t> have;
    for (const auto& p : points) have.insert(p.step);
    const auto& kept = m_rankSteps[key.rank];
    for (auto it = kept.lower_bound(points.front().step); it != kept.end() && *it <= points.back().step; ++it) {
      if (!have.count(*it)) missing.insert(*it);
    }
    if (missing.empty()) return "none";
    return std::to_string(missing.size()) + (missing.size() == 1 ? " step" : " steps") + ", first " +
           std::to_string(*missing.begin());
  }

private:
  std::map<int, std::set<std::int64_t>> m_rankSteps;
  std::map<SeriesKey, std::set<std::int64_t>> m_dropped;
};

// One line per series: its points, last norm, non-finite values, low-precision losses and gaps.
void describeSeries(std::ostringstream& out, const CaptureStore& store, const ExportManifest& m) {
  constexpr std::int64_t TensorStats::*kPrecision[] = {&TensorStats::f16Overflow, &TensorStats::f16Underflow,
                                                        &TensorStats::e4m3Underflow, &TensorStats::e5m2Underflow};
  GapFinder gaps(store, m);
  const bool severalRanks = store.ranks().size() > 1;
  out << "\n" << std::left << std::setw(36) << "series (kind module call/index)" << std::right << std::setw(8)
      << "points" << std::setw(16) << "last l2norm" << std::setw(12) << "non-finite" << std::setw(10) << "f16 over"
      << std::setw(10) << "f16 under" << std::setw(11) << "e4m3 under" << std::setw(11) << "e5m2 under"
      << "  gaps\n";
  for (const auto& key : store.seriesKeys()) {
    const auto points = store.series(key);
    if (points.empty()) continue;
    std::int64_t bad = 0;
    for (const auto& p : points) bad = saturatingAdd(bad, saturatingAdd(p.stats.nanCount, p.stats.infCount));
    const std::string name = std::string(captureKindName(key.kind)) + " " +
                             (key.module.empty() ? "(root)" : printableText(key.module, false)) + " " +
                             std::to_string(key.call) + "/" + std::to_string(key.index) +
                             (key.rank == kWholeRank ? " whole"
                              : severalRanks ? " rank " + std::to_string(key.rank) : "");
    out << std::left << std::setw(36) << name << std::right << std::setw(8) << points.size() << std::setw(16)
        << std::setprecision(6) << points.back().stats.l2norm << std::setw(12) << bad;
    for (std::size_t k = 0; k < std::size(kPrecision); ++k) {
      out << std::setw(k < 2 ? 10 : 11) << worstFraction(points, kPrecision[k]);
    }
    out << "  " << gaps.describe(key, points) << "\n";
  }
}

int runShow(const std::string& dir, std::int64_t memoryCapMiB) {
  ExportData data;
  std::string message;
  if (!readExportCapped(dir, memoryCapMiB, &data, &message)) return error(kData, message);
  // Every name here comes from the export's files: printed so that none can drive the terminal.
  std::ostringstream out;
  out << "HookScope capture " << dir << "\n";
  describeRun(out, data);
  describeSeries(out, *data.store, data.manifest);
  std::cout << printableText(out.str());
  return kOk;
}

} // namespace

Command addShowCommand(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  auto memoryCapMiB = std::make_shared<std::int64_t>(0);
  auto* command = app.add_subcommand("show", "Print a summary of an export folder.");
  command->add_option("dir", *dir, "export folder")->required();
  command->add_option("--memory-cap", *memoryCapMiB, kReadingCapHelp);
  return {command, [dir, memoryCapMiB] { return runShow(*dir, *memoryCapMiB); }};
}

} // namespace hookscope::cli
