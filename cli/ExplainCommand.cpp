// hookscope-cli explain: where a spike started. Each series against its own last steps (a
// normal band), and the first to leave it at the loss's largest excursion or a given step.
// Read without LibTorch.

#include "cli/CliCommands.h"
#include "cli/CliSupport.h"
#include "common/CsvFormat.h"
#include "common/OutputFile.h"
#include "common/PrintableText.h"
#include "common/ProgressLine.h"
#include "files/ExportFolder.h"
#include "store/Bands.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <sstream>

namespace hookscope::cli {

namespace {

struct ExplainOptions {
  std::string run;
  std::optional<std::int64_t> step;
  BandSettings settings;
  std::string csv;
  bool force = false;
  std::int64_t memoryCapMiB = 0;  ///< 0: half the memory available (readingCapBytes)
};

std::string number(double v) {
  std::ostringstream out;
  out << std::setprecision(9) << v;
  return out.str();
}

bool writeCsv(const std::string& path, const FirstMovers& result, std::string* error) {
  std::ostringstream out;
  out << "step,order,moved,kind,module,call,index,rank,start,statistic,value,score,back\n";
  int order = 0;
  for (const auto* list : {&result.movers, &result.furthest}) {
    for (const BandMover& m : *list) {
      out << result.step << "," << ++order << "," << (m.start ? 1 : 0) << "," << captureKindName(m.key.kind) << ","
          << csvField(m.key.module) << "," << m.key.call << "," << m.key.index << "," << m.key.rank << ","
          << (m.start ? std::to_string(*m.start) : std::string()) << "," << m.statistic << "," << number(m.value)
          << "," << number(m.score) << "," << (m.back ? std::to_string(*m.back) : std::string()) << "\n";
    }
  }
  return writeTextFile(path, out.str(), error);
}

int runExplain(const ExplainOptions& options) {
  if (!(options.settings.sigma > 0) || !std::isfinite(options.settings.sigma)) {
    return error(kUsage, "--sigma must be a positive number of deviations, such as 6");
  }
  if (options.settings.window < 2 || options.settings.window > kMaxBandWindow) {
    return error(kUsage, "--window must be 2 to " + std::to_string(kMaxBandWindow) +
                             " steps: a band's cost grows with its steps, and one of 200 (the default) is what the "
                             "anomaly rule and the window judge with");
  }
  if (!options.csv.empty()) {
    std::string why = checkOutputOutsideInputs(options.csv, {options.run});
    if (why.empty()) why = checkOutputFile(options.csv, options.force);
    if (!why.empty()) return error(kOutput, why);
  }
  // A long export takes seconds to read and score: said past the first second.
  ProgressLine progress("explain", "reading " + options.run);
  ExportData data;
  std::string message;
  if (!readExportCapped(options.run, options.memoryCapMiB, &data, &message)) {
    progress.stop();
    return error(kData, message);
  }
  if (options.step) {
    const auto steps = data.store->steps();
    if (std::find(steps.begin(), steps.end(), *options.step) == steps.end()) {
      progress.stop();
      return error(kUsage, "step " + std::to_string(*options.step) + " holds no captures in " + options.run +
                               (steps.empty() ? std::string(" (it holds none)")
                                              : " (its steps: " + std::to_string(steps.front()) + " to " +
                                                    std::to_string(steps.back()) + ")"));
    }
  }
  progress.stage("scoring " + std::to_string(data.store->seriesKeys().size()) + " series over " +
                 std::to_string(data.store->steps().size()) + " steps");
  const FirstMovers result = firstMovers(*data.store, data.manifest.modulePaths(), options.step, options.settings);
  progress.finish();
  std::ostringstream out;
  for (const auto& line : describeMovers(result)) out << line << "\n";
  // Every name comes from the export's files: printed so that none can drive the terminal.
  std::cout << printableText(out.str());
  if (!options.csv.empty() && !writeCsv(options.csv, result, &message)) return error(kOutput, message);
  return kOk;
}

} // namespace

Command addExplainCommand(CLI::App& app) {
  auto options = std::make_shared<ExplainOptions>();
  auto* command = app.add_subcommand(
      "explain", "Where a spike started: each series (module, kind, call, rank) against the band of its own last "
                 "steps (median and spread of its L2 norm, std, amax and zero fraction), and the first to leave it "
                 "at the loss's largest excursion (or --step S), by the step its excursion began, then by the order "
                 "the step made it. Says when the loss never left its band. Exit 0 whether or not one is found.");
  command->add_option("run", options->run, "export folder")->required();
  command->add_option("--step", options->step, "the step to explain (default: the loss's largest excursion)");
  command->add_option("--sigma", options->settings.sigma,
                      "how many robust deviations from its band count as having left it (default 6)");
  command->add_option("--window", options->settings.window, "the last steps a band is made of, 2 to 10000 (default 200)");
  command->add_option("--csv", options->csv, "also write every series named, with its start and score, to this CSV");
  command->add_flag("--force", options->force, "replace an existing --csv file");
  command->add_option("--memory-cap", options->memoryCapMiB, kReadingCapHelp);
  return {command, [options] { return runExplain(*options); }};
}

}  // namespace hookscope::cli
