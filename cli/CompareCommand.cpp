// hookscope-cli compare: two exports series by series, the first divergence first. Read
// without LibTorch.

#include "cli/CliCommands.h"
#include "cli/CliSupport.h"
#include "common/CsvFormat.h"
#include "common/OutputFile.h"
#include "common/PrintableText.h"
#include "files/ExportFolder.h"
#include "store/RunCompare.h"

#include <CLI/CLI.hpp>

#include <iomanip>
#include <iostream>
#include <set>
#include <sstream>

namespace hookscope::cli {

namespace {

struct CompareOptions {
  std::string a, b;
  double tolerance = 1e-4;
  std::string csv;
  bool force = false;
  std::int64_t memoryCapMiB = 0;  ///< 0: half the memory available (readingCapBytes)
};

std::string number(double v) {
  std::ostringstream out;
  out << std::setprecision(7) << v;
  return out.str();
}

/// The modules in the order the runs name them: run A's, then B's not in A.
std::vector<std::string> moduleOrder(const ExportManifest& a, const ExportManifest& b) {
  std::vector<std::string> order = a.modulePaths();
  std::set<std::string> seen(order.begin(), order.end());
  for (const auto& path : b.modulePaths()) {
    if (seen.insert(path).second) order.push_back(path);
  }
  return order;
}

bool writeCsv(const std::string& path, const RunComparison& result, std::string* error) {
  std::ostringstream out;
  out << "step,kind,module,call,index,rank,statistic,a,b\n";
  for (const auto& d : result.steps) {
    out << d.step << "," << captureKindName(d.key.kind) << "," << csvField(d.key.module) << "," << d.key.call << ","
        << d.key.index << "," << d.key.rank << "," << d.statistic << "," << number(d.a) << "," << number(d.b) << "\n";
  }
  return writeTextFile(path, out.str(), error);
}

void printList(std::ostringstream& out, const std::string& label, const std::vector<std::string>& names) {
  if (names.empty()) return;
  out << label << " (" << names.size() << "):";
  for (std::size_t i = 0; i < names.size() && i < 12; ++i) out << (i ? ", " : " ") << names[i];
  if (names.size() > 12) out << ", … and " << names.size() - 12 << " more";
  out << "\n";
}

int runCompare(const CompareOptions& options) {
  if (!(options.tolerance > 0)) return error(kUsage, "--tolerance must be a positive relative difference, such as 1e-4");
  if (!options.csv.empty()) {  // before the comparison: a refused file costs nothing
    std::string why = checkOutputOutsideInputs(options.csv, {options.a, options.b});
    if (why.empty()) why = checkOutputFile(options.csv, options.force);
    if (!why.empty()) return error(kOutput, why);
  }
  ExportData a, b;
  std::string message;
  if (!readExportCapped(options.a, options.memoryCapMiB, &a, &message)) return error(kData, message);
  if (!readExportCapped(options.b, options.memoryCapMiB, &b, &message)) return error(kData, message);
  const RunComparison result = compareRuns(*a.store, *b.store, options.tolerance, moduleOrder(a.manifest, b.manifest));
  // Every name comes from the exports' files: printed so that none can drive the terminal.
  std::ostringstream out;
  // Runs of different models first: their module trees, or a series' shapes, differ.
  const auto modulesA = a.manifest.modulePaths(), modulesB = b.manifest.modulePaths();
  if (!modulesA.empty() && !modulesB.empty() && modulesA != modulesB) {
    out << "these runs are of different models (their module trees differ): only the series both hold with the "
           "same shapes are compared\n";
  } else if (!result.shapesDiffer.empty()) {
    out << result.shapesDiffer.size() << " series differ in shape between the runs and are not compared\n";
  }
  if (result.diverged()) {
    out << "first divergence: " << describeDifference(result.first) << "\n";
  } else {
    out << "no divergence over " << result.stepsCompared << " steps and " << result.seriesCompared << " series\n";
  }
  out << "compared " << result.seriesCompared << " series both runs hold over the " << result.stepsCompared
      << " steps both kept, at a relative tolerance of " << number(options.tolerance) << "\n";
  if (result.diverged()) {
    out << "first differing series per step:\n";
    std::size_t shown = 0;
    for (const auto& d : result.steps) {
      if (++shown > 20) {
        out << "  … and " << result.steps.size() - 20 << " more steps" << (options.csv.empty() ? " (--csv FILE lists every one)" : "") << "\n";
        break;
      }
      out << "  " << describeDifference(d) << "\n";
    }
  }
  printList(out, "only in " + options.a, result.onlyInA);
  printList(out, "only in " + options.b, result.onlyInB);
  printList(out, "shapes differ, not compared", result.shapesDiffer);
  for (const auto& note : result.notes) out << "note: " << note << "\n";
  std::cout << printableText(out.str());
  if (!options.csv.empty() && !writeCsv(options.csv, result, &message)) return error(kOutput, message);
  return kOk;
}

} // namespace

Command addCompareCommand(CLI::App& app) {
  auto options = std::make_shared<CompareOptions>();
  auto* command = app.add_subcommand(
      "compare", "Compare two exports series by series: the first step and series where they differ beyond a "
                 "tolerance (activations in forward order, then gradients in backward order), then per step the first "
                 "that differs, and what only one run holds. Exit 0 whether or not they differ.");
  command->add_option("run_a", options->a, "first export folder")->required();
  command->add_option("run_b", options->b, "second export folder")->required();
  command->add_option("--tolerance", options->tolerance,
                      "relative difference of mean, std or L2 norm that counts as a divergence (default 1e-4; a "
                      "mean is measured against its std too)");
  command->add_option("--csv", options->csv, "also write every step's first differing series to this CSV file");
  command->add_flag("--force", options->force, "replace an existing --csv file");
  command->add_option("--memory-cap", options->memoryCapMiB, kReadingCapHelp);
  return {command, [options] { return runCompare(*options); }};
}

} // namespace hookscope::cli
