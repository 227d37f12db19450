// The reading side of an export folder (docs/export-format.md): readExport and what it checks.
#include "files/ExportFolder.h"

#include "common/CsvFormat.h"
#include "common/FileLimits.h"
#include "common/PrintableText.h"
#include "files/HistogramsFile.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace hookscope {

namespace fs = std::filesystem;

namespace {

std::string readText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<std::int64_t> parseShape(const std::string& text) {
  std::vector<std::int64_t> shape;
  std::istringstream in(text);
  std::string part;
  while (std::getline(in, part, 'x')) shape.push_back(std::stoll(part));
  return shape;
}

} // namespace

namespace {

// A series as the readers' messages name it: "activation 'fc1' (call 0, index 0, rank 0)".
std::string seriesText(const SeriesKey& key) {
  return std::string(captureKindName(key.kind)) + " '" +
         printableText(key.module.empty() ? "(root)" : key.module, false).substr(0, 200) + "' (call " +
         std::to_string(key.call) + ", index " + std::to_string(key.index) + ", rank " + std::to_string(key.rank) + ")";
}

// What stats.csv gave: each series' points at the steps read, and how many rows it has in the
// file (more than its points where only some steps are read: histograms.pt holds a row for each).
struct SeriesRead {
  std::map<SeriesKey, std::vector<SeriesPoint>> points;
  std::map<SeriesKey, std::size_t> rows;
};

// What a histograms.pt that does not match its stats.csv is said to be: kMismatch + what + kWhy.
const std::string kMismatch = "it does not match stats.csv: ";
const std::string kWhy = "; the export is damaged, or its files come from different runs";

// One table of histograms.pt into the points of its series; "" or what does not match.
std::string takeHistogramTable(const std::string& entryName, const HistogramTable& table, SeriesRead& series,
                               std::set<SeriesKey>& matched) {
  std::string name = entryName;
  const std::string shown = "'" + printableText(entryName, false).substr(0, 200) + "'";
  // "rank{r}/{kind}/{module}/{call}/{index}" (version 1: no rank); a module path may hold '/'.
  int rank = 0;
  std::optional<SeriesKey> key;
  try {
    if (name.rfind("rank", 0) == 0) {
      const auto slash = name.find('/');
      std::size_t used = 0;
      rank = std::stoi(name.substr(4, slash - 4), &used);
      if (slash == std::string::npos || used != slash - 4) throw std::invalid_argument("rank");
      name = name.substr(slash + 1);
    }
    const auto first = name.find('/');
    const auto last = name.rfind('/');
    const auto middle = first == std::string::npos || last == first ? first : name.rfind('/', last - 1);
    const auto kind = first == std::string::npos ? std::nullopt : parseCaptureKind(name.substr(0, first));
    if (kind && middle != first) {
      key = SeriesKey{name.substr(first + 1, middle - first - 1), std::stoi(name.substr(middle + 1, last - middle - 1)),
                      *kind, std::stoi(name.substr(last + 1)), rank};
    }
  } catch (const std::exception&) {
    key.reset();
  }
  if (!key) return "its table " + shown + " names no series (HookScope writes rank/kind/module/call/index)" + kWhy;
  auto found = series.points.find(*key);
  if (found == series.points.end()) return kMismatch + "its table " + shown + " is of a series stats.csv does not have" + kWhy;
  matched.insert(*key);
  std::map<std::int64_t, std::size_t> rowOfStep;
  for (std::size_t i = 0; i < table.steps.size(); ++i) rowOfStep[table.steps[i]] = i;
  const std::size_t rows = series.rows[*key];
  if (rowOfStep.size() != table.steps.size() || table.steps.size() != rows) {
    return kMismatch + "its table " + shown + " has " + std::to_string(table.steps.size()) + " rows" +
           (rowOfStep.size() != table.steps.size() ? " (a step given twice)" : "") + " where stats.csv has " +
           std::to_string(rows) + " steps" + kWhy;
  }
  const auto bins = std::size_t(table.bins);
  for (auto& point : found->second) {
    const auto row = rowOfStep.find(point.step);
    if (row == rowOfStep.end()) return kMismatch + "its table " + shown + " has no row for step " + std::to_string(point.step) + kWhy;
    const std::int64_t* c = table.counts.data() + row->second * bins;
    const double* e = table.edges.data() + row->second * (bins + 1);
    point.stats.histogram.assign(c, c + bins);
    point.stats.histLow = e[0];
    point.stats.histHigh = e[bins];
  }
  return "";
}

// Fills the histograms of `series` from histograms.pt, one table at a time as it is read; "" on
// success, else what is wrong. The file holds a table for every series of stats.csv, a row for
// each of its steps, as writeExport writes them: a table for no series, a series without one, or
// steps that differ is a damaged export (or files of two runs), said, never histograms quietly
// left out of what readers show.
std::string readHistograms(const std::string& path, SeriesRead& series) {
  std::set<SeriesKey> matched;
  std::string error;
  const bool read = readHistogramsFile(
      path, [&](const std::string& name, const HistogramTable& table) { return takeHistogramTable(name, table, series, matched); },
      &error);
  if (!read) return error.substr(0, 400);
  for (const auto& [key, rows] : series.rows) {
    if (rows > 0 && !matched.count(key)) {
      return kMismatch + "stats.csv has the series " + seriesText(key) + " and histograms.pt has no table for it" + kWhy;
    }
  }
  return "";
}

} // namespace

namespace {

// Reads the rows after a CSV header: `row` gets each non-empty record's fields and returns false
// when they are not what the file holds. "" when every row was read, else at which line a bad row starts.
template <class Row>
std::string readCsvRows(std::istream& in, Row&& row) {
  std::string record;
  int lines = 1;
  while (true) {
    const int lineNumber = lines + 1;
    if (!nextCsvRecord(in, &record, &lines)) break;
    if (record.empty() || record == "\r") continue;
    try {
      if (!row(splitCsvLine(record))) return "line " + std::to_string(lineNumber) + " is damaged.";
    } catch (const std::exception&) {
      return "line " + std::to_string(lineNumber) + " has a bad number.";
    }
  }
  return "";
}

// A version 2 row's second field is its rank: returns it and removes the field, so the row reads
// as in version 1, whose rows are all rank 0.
int takeRank(std::vector<std::string>& f, bool v1) {
  if (v1) return 0;
  const int rank = std::stoi(f[1]);
  f.erase(f.begin() + 1);
  return rank;
}

} // namespace

namespace {

// What an export folder must be before any of it is read: a folder with a manifest, whose files
// are plain files of a sane size. "" when it is, else what is wrong.
std::string checkExportFolder(const std::string& dir) {
  const fs::path folder(dir);
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return dir + " is not a folder: open a HookScope export folder.";
  if (!fs::exists(fs::symlink_status(folder / "manifest.json", ec))) {
    return dir + " has no manifest.json, so it is not a HookScope export folder.";
  }
  // Only regular files are opened: a FIFO would block, a link could lead to /dev/zero.
  for (const auto& name : exportFileNames()) {
    const fs::path path = folder / name;
    if (!fs::exists(fs::symlink_status(path, ec))) continue;
    if (std::string problem = checkRegularFile(path.string(), name); !problem.empty()) {
      return dir + ": " + problem + ". The export is damaged; export it again from its source.";
    }
  }
  if (fs::file_size(folder / "manifest.json", ec) > kManifestMaxBytes) {
    return dir + "/manifest.json is larger than any manifest HookScope writes (16 MiB): the export is damaged.";
  }
  return "";
}

// One row of stats.csv (its rank already taken out); false when it is not one.
bool statsRow(std::vector<std::string>& f, bool precision, SeriesKey* key, SeriesPoint* p) {
  const auto kind = parseCaptureKind(f[3]);
  if (!kind) return false;
  p->step = std::stoll(f[0]);
  p->stats.shape = parseShape(f[5]);
  p->stats.dtype = f[6];
  p->stats.numel = std::stoll(f[7]);
  p->stats.min = parseCsvDouble(f[8]);
  p->stats.max = parseCsvDouble(f[9]);
  p->stats.mean = parseCsvDouble(f[10]);
  p->stats.std = parseCsvDouble(f[11]);
  p->stats.l2norm = parseCsvDouble(f[12]);
  p->stats.zeroFraction = parseCsvDouble(f[13]);
  p->stats.nanCount = std::stoll(f[14]);
  p->stats.infCount = std::stoll(f[15]);
  // Counts read from a file: each in range before any arithmetic on them (numel - NaN - Inf).
  const std::int64_t numel = p->stats.numel, nan = p->stats.nanCount, inf = p->stats.infCount;
  if (p->step < 0 || numel < 0 || nan < 0 || inf < 0 || nan > numel || inf > numel - nan) return false;
  if (precision && !f[16].empty()) {
    p->stats.amax = parseCsvDouble(f[16]);
    p->stats.f16Overflow = std::stoll(f[17]);
    p->stats.f16Underflow = std::stoll(f[18]);
    p->stats.e4m3Underflow = std::stoll(f[19]);
    p->stats.e5m2Underflow = std::stoll(f[20]);
    const std::int64_t finite = p->stats.numel - p->stats.nanCount - p->stats.infCount;
    for (const std::int64_t count : {p->stats.f16Overflow, p->stats.f16Underflow, p->stats.e4m3Underflow,
                                     p->stats.e5m2Underflow}) {
      if (count < 0 || count > finite) return false;
    }
  }
  *key = SeriesKey{f[1], std::stoi(f[2]), *kind, std::stoi(f[4]), key->rank};
  return true;
}

// Which steps of stats.csv readExport keeps: every one, or, where the export would take more
// memory than the cap, the grid a thinning of the store leaves: the first step, every `stride`-th
// after it, and the newest.
struct StepChoice {
  std::int64_t first = 0;
  std::int64_t last = 0;
  std::int64_t stride = 1;
  ThinningEvent thinning;  // what the store records where stride > 1
  bool keeps(std::int64_t step) const { return stride == 1 || step == last || (step - first) % stride == 0; }
};

// The steps to keep of an export that would not fit under capBytes in memory (what is wrong with
// stats.csv, readStatsCsv says after). An export smaller on disk than the cap, with its
// histograms (a row in memory takes about two thirds of its text and its histogram's record),
// is kept whole without counting its rows. Otherwise stats.csv's rows and steps are counted
// from each row's first field, and the stride doubles from the steps' own spacing (a recording
// thinned already) until the rows of the steps kept fit in nine tenths of the cap.
void chooseSteps(const fs::path& folder, std::size_t capBytes, StepChoice* keep) {
  std::error_code ec;
  const std::uintmax_t statsBytes = fs::file_size(folder / "stats.csv", ec);
  if (ec) return;
  std::uintmax_t histogramBytes = fs::file_size(folder / "histograms.pt", ec);
  if (ec) histogramBytes = 0;
  if (2 * statsBytes + histogramBytes <= capBytes) return;
  std::ifstream in(folder / "stats.csv");
  std::string record;
  int lines = 1;
  std::getline(in, record);  // the header
  std::int64_t rows = 0;
  std::set<std::int64_t> steps;
  while (nextCsvRecord(in, &record, &lines)) {
    char* end = nullptr;
    const long long step = std::strtoll(record.c_str(), &end, 10);
    if (end == record.c_str() || *end != ',') continue;  // not a row: readStatsCsv says so
    ++rows;
    steps.insert(step);
  }
  if (steps.size() < 3) return;
  const double perRow = double(CaptureStore::pointBytes(TensorStats{})) + 48.0 + double(histogramBytes) / double(rows) / 2.0;
  const double budget = 0.9 * double(capBytes);
  keep->first = *steps.begin();
  keep->last = *steps.rbegin();
  std::int64_t spacing = 0;
  for (const std::int64_t step : steps) {
    if (step != keep->last) spacing = std::gcd(spacing, step - keep->first);
  }
  auto stepsKept = [&](std::int64_t stride) {
    StepChoice probe = *keep;
    probe.stride = stride;
    return std::int64_t(std::count_if(steps.begin(), steps.end(), [&](std::int64_t s) { return probe.keeps(s); }));
  };
  auto bytesOf = [&](std::int64_t kept) { return double(rows) * double(kept) / double(steps.size()) * perRow; };
  if (bytesOf(std::int64_t(steps.size())) <= budget) return;
  std::int64_t stride = std::max<std::int64_t>(spacing, 1);
  while (stepsKept(stride) > 2 && bytesOf(stepsKept(stride)) > budget) stride *= 2;
  if (stride == 1) return;
  keep->stride = stride;
  keep->thinning.atStep = keep->last;
  keep->thinning.stepsBefore = std::int64_t(steps.size());
  keep->thinning.stepsAfter = stepsKept(stride);
  keep->thinning.bytesBefore = std::size_t(bytesOf(std::int64_t(steps.size())));
  keep->thinning.bytesAfter = std::size_t(bytesOf(keep->thinning.stepsAfter));
  keep->thinning.stride = stride;
}

// stats.csv of any version into `series`; "" when it was read, else what is wrong.
// "" when `file` holds the rows the manifest says it was written with (or the manifest is older
// than that count); else that the file was cut (after its last step) or grew.
std::string checkRowCount(const ExportManifest& manifest, const std::string& dir, const std::string& file,
                          std::int64_t rows, std::int64_t lastStep) {
  const auto it = manifest.rows.find(file);
  if (it == manifest.rows.end() || it->second == rows) return "";
  if (rows < it->second) {
    return dir + "/" + file + " is cut" + (rows > 0 ? " after step " + std::to_string(lastStep) : std::string(" before its first row")) +
           ": it holds " + std::to_string(rows) + " of the " + std::to_string(it->second) +
           " rows manifest.json says were written. The export is damaged (a copy that stopped short?); "
           "copy or export it again from its source.";
  }
  return dir + "/" + file + " holds " + std::to_string(rows) + " rows where manifest.json says " +
         std::to_string(it->second) + " were written: rows were added after the export. Export the run again.";
}

std::string readStatsCsv(const fs::path& folder, const std::string& dir, SeriesRead* series,
                         const ExportManifest& manifest, const StepChoice& keep) {
  std::ifstream in(folder / "stats.csv");
  if (!in) return dir + " has no stats.csv: the export is incomplete.";
  std::string line;
  std::getline(in, line);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  const bool v1 = line == kStatsCsvHeaderV1;
  const bool precision = line == kStatsCsvHeader;  // version 3
  if (!v1 && !precision && line != kStatsCsvHeaderV2) return dir + "/stats.csv does not start with the expected header.";
  std::int64_t rows = 0, lastStep = 0;
  const std::string problem = readCsvRows(in, [&](std::vector<std::string> f) {
    if (f.size() != (v1 ? 16u : precision ? 22u : 17u)) return false;
    SeriesKey key;
    key.rank = takeRank(f, v1);
    SeriesPoint p;
    if ((key.rank < 0 && key.rank != kWholeRank) || !statsRow(f, precision, &key, &p)) return false;
    ++rows;
    lastStep = p.step;
    ++series->rows[key];
    auto& points = series->points[key];  // a series whose steps are all left out is still one
    if (keep.keeps(p.step)) points.push_back(std::move(p));
    return true;
  });
  if (!problem.empty()) return dir + "/stats.csv " + problem;
  if (std::string cut = checkRowCount(manifest, dir, "stats.csv", rows, lastStep); !cut.empty()) return cut;
  // In step order whatever the rows' order; a step given twice for one tensor is damage (every
  // row twice, or every row labelled step 0), not a series to judge.
  for (auto& [key, points] : series->points) {
    std::stable_sort(points.begin(), points.end(),
                     [](const SeriesPoint& a, const SeriesPoint& b) { return a.step < b.step; });
    const auto twice = std::adjacent_find(points.begin(), points.end(),
                                          [](const SeriesPoint& a, const SeriesPoint& b) { return a.step == b.step; });
    if (twice != points.end()) {
      return dir + "/stats.csv has step " + std::to_string(twice->step) + " of " + seriesText(key) +
             " twice: the export is damaged; export it again from its source.";
    }
  }
  return "";
}

std::string readScalarsCsv(const fs::path& folder, const std::string& dir, CaptureStore* store,
                           const ExportManifest& manifest) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(folder / "scalars.csv", ec))) {
    return dir + " has no scalars.csv (every export has one, if only its header): the export is incomplete.";
  }
  if (std::string problem = checkRegularFile((folder / "scalars.csv").string(), "scalars.csv"); !problem.empty()) {
    return dir + "/" + problem;
  }
  std::ifstream in(folder / "scalars.csv");
  std::string line;
  std::getline(in, line);
  const bool v1 = line.rfind("step,name,value", 0) == 0;
  if (!v1 && line.rfind("step,rank,name,value", 0) != 0) return dir + "/scalars.csv does not start with the expected header.";
  std::int64_t rows = 0, lastStep = 0;
  std::map<std::pair<int, std::string>, std::vector<std::pair<std::int64_t, double>>> scalars;
  int lines = 1;
  while (true) {
    const int number = lines + 1;
    if (!nextCsvRecord(in, &line, &lines)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    auto f = splitCsvLine(line);
    if (f.size() != (v1 ? 3u : 4u)) {
      return dir + "/scalars.csv line " + std::to_string(number) + " has " + std::to_string(f.size()) + " fields where " +
             (v1 ? "3" : "4") + " are expected: the file is damaged.";
    }
    try {
      const int rank = takeRank(f, v1);
      lastStep = std::stoll(f[0]);
      scalars[{rank, f[1]}].push_back({lastStep, parseCsvDouble(f[2])});
      ++rows;
    } catch (const std::exception&) {
      return dir + "/scalars.csv line " + std::to_string(number) + " has a bad number: " +
             printableText(line, false).substr(0, 200);
    }
  }
  if (std::string cut = checkRowCount(manifest, dir, "scalars.csv", rows, lastStep); !cut.empty()) return cut;
  // In step order, each step once (as stats.csv).
  for (auto& [which, points] : scalars) {
    std::stable_sort(points.begin(), points.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    const auto twice = std::adjacent_find(points.begin(), points.end(),
                                          [](const auto& a, const auto& b) { return a.first == b.first; });
    if (twice != points.end()) {
      return dir + "/scalars.csv has step " + std::to_string(twice->first) + " of '" +
             printableText(which.second, false).substr(0, 200) + "' (rank " + std::to_string(which.first) +
             ") twice: the export is damaged; export it again from its source.";
    }
    for (const auto& [step, value] : points) store->addScalar(step, which.second, value, which.first);
  }
  return "";
}

std::string readAlertsCsv(const fs::path& folder, const std::string& dir, std::vector<Alert>* alerts) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(folder / "alerts.csv", ec))) return "";
  std::ifstream in(folder / "alerts.csv");
  std::string line;
  std::getline(in, line);
  const bool v1 = line.rfind("step,module,", 0) == 0;
  const std::string problem = readCsvRows(in, [&](std::vector<std::string> f) {
    if (f.size() != (v1 ? 8u : 9u)) return false;
    const int rank = takeRank(f, v1);
    const auto kind = parseCaptureKind(f[2]);
    const auto rule = parseRuleName(f[3]);
    if (!kind || !rule) return false;
    Alert a;
    a.rank = rank;
    a.step = std::stoll(f[0]);
    a.module = f[1];
    a.kind = *kind;
    a.rule = *rule;
    a.value = parseCsvDouble(f[4]);
    a.message = f[5];
    a.lastStep = std::stoll(f[6]);
    a.count = std::stoll(f[7]);
    alerts->push_back(std::move(a));
    return true;
  });
  return problem.empty() ? "" : dir + "/alerts.csv " + problem;
}

} // namespace

bool readExport(const std::string& dir, ExportData* data, std::string* error, std::size_t capBytes) {
  auto fail = [&](const std::string& message) {
    if (error) *error = message;
    return false;
  };
  if (std::string problem = checkExportFolder(dir); !problem.empty()) return fail(problem);
  const fs::path folder(dir);
  std::error_code ec;
  ExportData result;
  if (!ExportManifest::fromJson(readText(folder / "manifest.json"), &result.manifest, error)) return false;
  StepChoice keep;
  chooseSteps(folder, capBytes, &keep);
  // Uncapped while it fills: a store that thinned as series after series came would keep the steps
  // of the last ones it had seen whole (its cap is set at the end, thinning what the estimate missed).
  result.store = std::make_shared<CaptureStore>(std::numeric_limits<std::size_t>::max());
  if (keep.stride > 1) result.store->recordThinning(keep.thinning);
  SeriesRead series;
  if (std::string problem = readStatsCsv(folder, dir, &series, result.manifest, keep); !problem.empty()) return fail(problem);
  if (fs::exists(fs::symlink_status(folder / "histograms.pt", ec))) {
    if (std::string problem = readHistograms((folder / "histograms.pt").string(), series); !problem.empty()) {
      return fail(dir + "/histograms.pt cannot be read: " + problem + ".");
    }
  }
  for (auto& [key, points] : series.points) {
    for (auto& p : points) result.store->add(p.step, key, std::move(p.stats));
    std::vector<SeriesPoint>().swap(points);  // the read copy goes as the store takes it
  }
  if (std::string problem = readScalarsCsv(folder, dir, result.store.get(), result.manifest); !problem.empty()) {
    return fail(problem);
  }
  if (std::string problem = readAlertsCsv(folder, dir, &result.alerts); !problem.empty()) return fail(problem);
  result.store->setCapBytes(capBytes);
  result.hasTensors = fs::exists(folder / "tensors.pt", ec);
  *data = std::move(result);
  return true;
}

std::size_t readingCapBytes(std::int64_t mib) {
  constexpr std::size_t kMiB = std::size_t(1) << 20;
  if (mib > 0) return std::size_t(std::min<std::int64_t>(mib, std::int64_t(1) << 40)) * kMiB;
  std::size_t availableKiB = std::size_t(8) << 20;  // 8 GiB: half of it where /proc/meminfo says nothing
  std::ifstream meminfo("/proc/meminfo");
  std::string name;
  std::size_t value = 0;
  while (meminfo >> name >> value) {
    if (name == "MemAvailable:") {
      availableKiB = value;
      break;
    }
    meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return std::max<std::size_t>(availableKiB / 2 * 1024, 512 * kMiB);
}

std::string thinnedReadText(const std::string& dir, const CaptureStore& store, std::size_t capBytes) {
  const auto thinned = store.thinning();
  if (thinned.empty() || thinned.front().stepsAfter >= thinned.front().stepsBefore) return "";
  // The read's own thinning first; the store may have thinned again where the estimate fell short.
  const ThinningEvent& read = thinned.front();
  return dir + " was read at 1 step in " + std::to_string(store.stride()) + " (" +
         std::to_string(thinned.back().stepsAfter) + " of its " + std::to_string(read.stepsBefore) +
         " steps): all of them would take about " + std::to_string(read.bytesBefore >> 20) + " MiB, over the " +
         std::to_string(capBytes >> 20) + " MiB memory cap";
}

} // namespace hookscope
