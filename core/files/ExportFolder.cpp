#include "files/ExportFolder.h"

#include "common/CsvFormat.h"
#include "files/HistogramsFile.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <deque>
#include <fstream>
#include <map>
#include <stdexcept>
#include <utility>

namespace hookscope {

namespace fs = std::filesystem;

namespace {

struct WriteFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class FileSink {
public:
  FileSink(fs::path folder, const ExportOptions& options) : m_folder(std::move(folder)), m_options(options) {}

  void write(const std::string& name, const char* data, std::size_t size) {
    if (m_options.failAfterFiles >= 0 && m_written >= m_options.failAfterFiles) {
      throw WriteFailure("writing " + name + " failed (injected fault)");
    }
    const fs::path path = m_folder / name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(data, std::streamsize(size));
    out.flush();
    if (!out) throw WriteFailure("cannot write " + path.string() + ": disk full or not writable");
    ++m_written;
  }
  void write(const std::string& name, const std::string& text) { write(name, text.data(), text.size()); }
  /// Writes a file through `writer(path, &error)` (a library that writes its own files).
  template <typename Writer>
  void writeWith(const std::string& name, Writer&& writer) {
    if (m_options.failAfterFiles >= 0 && m_written >= m_options.failAfterFiles) {
      throw WriteFailure("writing " + name + " failed (injected fault)");
    }
    std::string error;
    if (!writer((m_folder / name).string(), &error)) throw WriteFailure(error + " (disk full or not writable?)");
    ++m_written;
  }

private:
  fs::path m_folder;
  const ExportOptions& m_options;
  int m_written = 0;
};

struct Row {
  std::int64_t step;
  const SeriesKey* key;
  const TensorStats* stats;
};

// The store's series, read in place while it is locked (CaptureStore::readAll): no copy.
using AllSeries = std::map<SeriesKey, std::deque<SeriesPoint>>;

// stats.csv, written row by row into `path` (never the whole text in memory): rows in step order.
bool writeStatsCsv(const std::string& path, const AllSeries& all, std::string* error) {
  std::vector<Row> rows;
  for (const auto& [key, points] : all) {
    for (const auto& p : points) rows.push_back({p.step, &key, &p.stats});
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.step < b.step; });
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << kStatsCsvHeader << '\n';
  std::string out;
  for (const Row& r : rows) {
    const TensorStats& s = *r.stats;
    out += std::to_string(r.step) + ',' + std::to_string(r.key->rank) + ',' + csvField(r.key->module) + ',' + std::to_string(r.key->call) +
           ',' + captureKindName(r.key->kind) + ',' + std::to_string(r.key->index) + ',' +
           s.shapeString() + ',' + s.dtype + ',' + std::to_string(s.numel) + ',' + formatDouble(s.min) +
           ',' + formatDouble(s.max) + ',' + formatDouble(s.mean) + ',' + formatDouble(s.std) + ',' +
           formatDouble(s.l2norm) + ',' + formatDouble(s.zeroFraction) + ',' +
           std::to_string(s.nanCount) + ',' + std::to_string(s.infCount);
    // Not measured (an older script): empty fields, which pandas and csv readers take as missing.
    if (s.hasPrecision()) {
      out += ',' + formatDouble(s.amax) + ',' + std::to_string(s.f16Overflow) + ',' + std::to_string(s.f16Underflow) +
             ',' + std::to_string(s.e4m3Underflow) + ',' + std::to_string(s.e5m2Underflow) + '\n';
    } else {
      out += ",,,,,\n";
    }
    if (out.size() > (std::size_t(1) << 20)) {  // a MiB at a time
      file << out;
      out.clear();
    }
  }
  file << out;
  file.flush();
  if (!file) *error = "cannot write " + path;
  return bool(file);
}

// scalars.csv, and in `rowCount` its rows (not its lines: a name may hold a newline).
std::string scalarsCsv(const CaptureStore& store, std::int64_t* rowCount) {
  std::vector<std::tuple<std::int64_t, int, std::string, double>> rows;
  for (const int rank : store.ranks()) {
    for (const auto& name : store.scalarNames()) {
      for (const auto& p : store.scalars(name, rank)) rows.emplace_back(p.step, rank, name, p.value);
    }
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
  std::string out = "step,rank,name,value\n";
  for (const auto& [step, rank, name, value] : rows) {
    out += std::to_string(step) + ',' + std::to_string(rank) + ',' + csvField(name) + ',' + formatDouble(value) + '\n';
  }
  *rowCount = std::int64_t(rows.size());
  return out;
}

// histograms.pt, written one series at a time from `all` (never a second copy of every
// histogram): keyed "rank{r}/{kind}/{module}/{call}/{index}".
bool writeHistograms(const std::string& path, const AllSeries& all, std::string* error) {
  std::vector<HistogramShape> shapes;
  std::vector<const std::deque<SeriesPoint>*> source;  // the points each shape is
  for (const auto& [key, points] : all) {
    if (points.empty()) continue;
    std::int64_t bins = 0;
    for (const auto& p : points) bins = std::max<std::int64_t>(bins, std::int64_t(p.stats.histogram.size()));
    shapes.push_back({"rank" + std::to_string(key.rank) + "/" + captureKindName(key.kind) + "/" + key.module + "/" +
                          std::to_string(key.call) + "/" + std::to_string(key.index),
                      std::int64_t(points.size()), bins});
    source.push_back(&points);
  }
  return writeHistogramsFile(path, shapes, [&](std::size_t s, HistogramTable* table, std::string*) {
    const auto& points = *source[s];
    const auto bins = std::size_t(shapes[s].bins);
    table->bins = shapes[s].bins;
    table->counts.assign(points.size() * bins, 0);
    table->edges.assign(points.size() * (bins + 1), 0.0);
    table->amax.assign(points.size(), 0.0);
    for (auto& counts : table->precision) counts.assign(points.size(), 0);
    for (std::size_t i = 0; i < points.size(); ++i) {
      const auto& st = points[i].stats;
      table->amax[i] = st.amax;
      table->precision[0][i] = st.f16Overflow;
      table->precision[1][i] = st.f16Underflow;
      table->precision[2][i] = st.e4m3Underflow;
      table->precision[3][i] = st.e5m2Underflow;
      table->steps.push_back(points[i].step);
      std::copy(st.histogram.begin(), st.histogram.end(), table->counts.begin() + std::ptrdiff_t(i * bins));
      const auto e = st.edges();
      std::copy(e.begin(), e.begin() + std::ptrdiff_t(std::min(e.size(), bins + 1)),
                table->edges.begin() + std::ptrdiff_t(i * (bins + 1)));
    }
    return true;
  }, error);
}

} // namespace

bool writeExport(const std::string& dir, const ExportManifest& manifest, const CaptureStore& store,
                 const std::vector<char>& tensorsPickle, const ExportOptions& options,
                 std::string* error) {
  auto fail = [&](const std::string& message) {
    if (error) *error = message;
    return false;
  };
  if (std::string problem = checkExportTarget(dir, options.overwrite); !problem.empty()) return fail(problem);
  std::unique_ptr<ExportLock> lock;
  std::string lockError;
  if (!options.lockHeld && !(lock = ExportLock::acquire(dir, &lockError))) return fail(lockError);
  recoverInterruptedWrites(dir);
  std::error_code ec;
  const fs::path target(exportTargetPath(dir));
  const fs::path parent = target.parent_path();
  fs::create_directories(parent, ec);
  if (ec) return fail("cannot create " + parent.string() + ": " + ec.message());
  const fs::path temp(temporaryExportPath(target.string()));
  fs::remove_all(temp, ec);
  if (!fs::create_directory(temp, ec)) {
    if (ec == std::errc::filename_too_long) return fail(nameTooLong(target));
    return fail("cannot write into " + parent.string() + ": " +
                (ec ? ec.message() : std::string("cannot create a folder there")));
  }
  const bool existed = fs::exists(target, ec);
  try {
    FileSink sink(temp, options);
    // The manifest last: it says how many rows each CSV was written with (a reader tells a cut
    // file from a smaller run), counted from what was written while the store was read.
    ExportManifest written = manifest;
    const std::string scalars = scalarsCsv(store, &written.rows["scalars.csv"]);
    sink.write("scalars.csv", scalars);
    // Written from the store in place, not from a copy of it, and stats.csv a MiB at a time: an
    // export's peak memory is the store's cap plus a pointer per row.
    store.readAll([&](const AllSeries& all) {
      std::int64_t statsRows = 0;
      for (const auto& [key, points] : all) statsRows += std::int64_t(points.size());
      written.rows["stats.csv"] = statsRows;
      sink.writeWith("stats.csv",
                     [&](const std::string& path, std::string* error) { return writeStatsCsv(path, all, error); });
      sink.writeWith("histograms.pt",
                     [&](const std::string& path, std::string* error) { return writeHistograms(path, all, error); });
    });
    sink.write("manifest.json", written.toJson());
    if (!tensorsPickle.empty()) sink.write("tensors.pt", tensorsPickle.data(), tensorsPickle.size());
    for (const auto& [name, text] : options.extraFiles) sink.write(name, text);
  } catch (const std::exception& e) {
    fs::remove_all(temp, ec);
    return fail(std::string("export failed, ") + (existed ? dir + " is unchanged: " : "nothing was written to " + dir + ": ") +
                e.what());
  }
  std::string moveError;
  if (!moveIntoPlace(temp.string(), target.string(), &moveError)) {
    fs::remove_all(temp, ec);
    return fail(moveError);
  }
  return true;
}

} // namespace hookscope
