#include "files/HistogramsFile.h"

#include "common/FileLimits.h"
#include "files/PickleShape.h"
#include "files/TorchPickle.h"

#include <zip.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <variant>

namespace hookscope {

namespace {

constexpr const char* kArchive = "archive";  // torch.save names the zip's folder after the file; any name loads
constexpr std::uint64_t kMaxPickleBytes = 64ull << 20;
constexpr int kRecordsPerSeries = 8;  // steps, counts, edges, amax and the four precision counts

using pickle::Ref;
using pickle::Dict;

[[noreturn]] void bad(const std::string& what) { throw std::runtime_error(what); }

struct ZipCloser {
  void operator()(zip_t* z) const {
    if (z) zip_discard(z);
  }
};

// Adds a stored record named archive/NAME from `source` (taken over, freed on failure).
bool addSourceRecord(zip_t* z, const std::string& name, zip_source_t* source, std::string* error) {
  const zip_int64_t index = zip_file_add(z, (std::string(kArchive) + "/" + name).c_str(), source, ZIP_FL_ENC_UTF_8);
  if (index < 0) {
    zip_source_free(source);
    *error = zip_strerror(z);
    return false;
  }
  // Stored, as torch.save stores its records.
  if (zip_set_file_compression(z, zip_uint64_t(index), ZIP_CM_STORE, 0) != 0) {
    *error = zip_strerror(z);
    return false;
  }
  return true;
}

bool addRecord(zip_t* z, const std::string& name, const void* data, std::size_t size, std::string* error) {
  zip_source_t* source = zip_source_buffer(z, data, size, 0);
  if (!source) {
    *error = zip_strerror(z);
    return false;
  }
  return addSourceRecord(z, name, source, error);
}

// A whole record (`size`: its size in the zip's directory), read to its end so that libzip checks
// its CRC-32: a flipped bit is an error naming the record, never different numbers. With `keep`
// false, only checked (read in slices, nothing kept).
std::string recordText(zip_t* z, zip_int64_t index, std::uint64_t size, bool keep = true) {
  const char* name = zip_get_name(z, zip_uint64_t(index), 0);
  const std::string record = name ? name : "a record";
  std::unique_ptr<zip_file_t, int (*)(zip_file_t*)> file(zip_fopen_index(z, zip_uint64_t(index), 0), zip_fclose);
  if (!file) bad("cannot read " + record + ": " + zip_strerror(z));
  const auto damaged = [&] {
    bad(record + " is damaged: " + zip_file_strerror(file.get()) +
        " (its bytes do not match the CRC-32 the archive records for it)");
  };
  std::string out(std::size_t(keep ? size : std::min<std::uint64_t>(size, 1 << 20)), '\0');
  std::uint64_t got = 0;
  while (got < size) {
    char* at = keep ? out.data() + got : out.data();
    const zip_int64_t n = zip_fread(file.get(), at, keep ? size - got : std::min<std::uint64_t>(size - got, out.size()));
    if (n < 0) damaged();
    if (n == 0) bad(record + " is cut short");
    got += std::uint64_t(n);
  }
  char past = 0;
  const zip_int64_t end = zip_fread(file.get(), &past, 1);  // the end: where libzip checks the CRC
  if (end < 0) damaged();
  if (end > 0) bad(record + " holds more bytes than the archive's directory says");
  return keep ? out : std::string();
}

// The tensor's values, checked: the storage type the format says, `dims` dimensions, contiguous,
// and inside the bytes its record really holds (never the pickle's own claim of its size).
template <typename T>
std::vector<T> tensorValues(zip_t* z, const std::string& prefix, const Ref& value, const char* storageType, int dims,
                            const std::string& what, std::vector<std::int64_t>* sizes, std::vector<char>* checked) {
  const auto* t = std::get_if<pickle::Tensor>(&value->v);
  if (!t) bad(what + " is not a tensor");
  if (t->storage.type != storageType || int(t->sizes.size()) != dims || t->strides.size() != t->sizes.size()) {
    bad(what + " is not a " + std::to_string(dims) + "-dimensional tensor of " + storageType +
        ": it does not have the shapes and types of the format (steps int64[S], counts int64[S, bins], edges "
        "float64[S, bins+1])");
  }
  std::uint64_t count = 1;
  std::int64_t stride = 1;
  for (int d = dims; d-- > 0;) {
    const std::int64_t size = t->sizes[std::size_t(d)];
    if (size < 0 || size > (std::int64_t(1) << 40)) bad(what + " has a size out of range");
    if (size > 1 && t->strides[std::size_t(d)] != stride) bad(what + " is not stored contiguously");
    count *= std::uint64_t(size);
    if (count > (std::uint64_t(1) << 40)) bad(what + " is too large");
    stride *= std::max<std::int64_t>(size, 1);
  }
  if (t->offset < 0 || t->offset > (std::int64_t(1) << 40)) bad(what + " has a storage offset out of range");
  const std::string name = prefix + "data/" + t->storage.key;
  const zip_int64_t index = zip_name_locate(z, name.c_str(), 0);
  zip_stat_t st;
  if (index < 0 || zip_stat_index(z, zip_uint64_t(index), 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE)) {
    bad(what + "'s storage record " + name + " is missing");
  }
  const std::uint64_t needed = (std::uint64_t(t->offset) + count) * sizeof(T);
  if (needed > st.size) {
    bad(what + " needs " + std::to_string(needed) + " bytes, but its storage record holds " + std::to_string(st.size) +
        ": the file is damaged or was altered");
  }
  const std::string bytes = recordText(z, index, st.size);  // all of it: its CRC-32 is checked
  (*checked)[std::size_t(index)] = 1;
  std::vector<T> out(static_cast<std::size_t>(count));
  if (count) std::memcpy(out.data(), bytes.data() + std::size_t(t->offset) * sizeof(T), std::size_t(count) * sizeof(T));
  *sizes = t->sizes;
  return out;
}

bool readZip(zip_t* z, std::uint64_t fileBytes, const std::string& path, const HistogramTableReader& each,
             std::string* error) {
  try {
    const zip_int64_t entries = zip_get_num_entries(z, 0);
    std::uint64_t inflated = 0;
    std::string prefix;
    zip_int64_t pickleIndex = -1;
    std::uint64_t pickleSize = 0;
    for (zip_int64_t i = 0; i < entries; ++i) {
      zip_stat_t st;
      if (zip_stat_index(z, zip_uint64_t(i), 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE) || !(st.valid & ZIP_STAT_NAME)) {
        bad("a record of the archive cannot be read");
      }
      inflated += st.size;
      const std::string name = st.name;
      const auto slash = name.find('/');
      if (slash != std::string::npos && name.compare(slash, std::string::npos, "/data.pkl") == 0) {
        prefix = name.substr(0, slash + 1);
        pickleIndex = i;
        pickleSize = st.size;
      }
    }
    if (std::string problem = checkInflatedSize(path, fileBytes, inflated); !problem.empty()) bad(problem);
    if (pickleIndex < 0) bad("it holds no data.pkl: it is not a torch.save file");
    if (pickleSize > kMaxPickleBytes) bad("its data.pkl is " + std::to_string(pickleSize) + " bytes, over the limit");
    const std::string pickled = recordText(z, pickleIndex, pickleSize);
    // Records whose CRC-32 was checked as they were read (the others are checked at the end).
    std::vector<char> checked(std::size_t(entries), 0);
    checked[std::size_t(pickleIndex)] = 1;
    if (std::string problem = checkPickleShape(pickled.data(), pickled.size()); !problem.empty()) bad(problem);
    const Ref root = pickle::unpickle(pickled);
    const auto* dict = std::get_if<Dict>(&root->v);
    if (!dict) bad("it holds something else, not HookScope's dict of histograms");
    for (const auto& [key, value] : *dict) {
      const auto* name = std::get_if<std::string>(&key->v);
      if (!name) bad("a key is not a name");
      const std::string entry = "the entry '" + *name + "'";
      const auto* fields = std::get_if<Dict>(&value->v);
      if (!fields) bad(entry + " is not a dict");
      std::map<std::string, Ref> byName;
      for (const auto& [k, v] : *fields) {
        if (const auto* field = std::get_if<std::string>(&k->v)) byName[*field] = v;
      }
      for (const char* field : {"steps", "counts", "edges"}) {
        if (!byName.count(field)) bad(entry + " has no tensor '" + field + "'");
      }
      HistogramTable table;
      std::vector<std::int64_t> stepSizes, countSizes, edgeSizes;
      table.steps =
          tensorValues<std::int64_t>(z, prefix, byName["steps"], "LongStorage", 1, entry + "'s steps", &stepSizes, &checked);
      table.counts =
          tensorValues<std::int64_t>(z, prefix, byName["counts"], "LongStorage", 2, entry + "'s counts", &countSizes, &checked);
      table.edges =
          tensorValues<double>(z, prefix, byName["edges"], "DoubleStorage", 2, entry + "'s edges", &edgeSizes, &checked);
      if (countSizes[0] != stepSizes[0] || edgeSizes[0] != stepSizes[0] || edgeSizes[1] != countSizes[1] + 1) {
        bad(entry + " does not have the shapes of the format (steps int64[S], counts int64[S, bins], edges "
                    "float64[S, bins+1])");
      }
      table.bins = countSizes[1];
      if (std::string problem = each(*name, table); !problem.empty()) bad(problem);
    }
    // Every other record against its CRC-32 too, the ones this reader does not use (a damaged
    // file is said to be damaged, whichever part of it a reader needs).
    for (zip_int64_t i = 0; i < entries; ++i) {
      zip_stat_t st;
      if (!checked[std::size_t(i)] && zip_stat_index(z, zip_uint64_t(i), 0, &st) == 0 && (st.valid & ZIP_STAT_SIZE)) {
        recordText(z, i, st.size, false);
      }
    }
  } catch (const std::exception& e) {
    *error = e.what();
    return false;
  }
  return true;
}

} // namespace

namespace {

// The series whose values the records being written come from: one at a time, asked for when
// libzip opens its first record (records are written in order at zip_close).
struct SeriesCache {
  const std::function<bool(std::size_t, HistogramTable*, std::string*)>* fill = nullptr;
  const std::vector<HistogramShape>* shapes = nullptr;
  std::size_t index = std::size_t(-1);
  HistogramTable table;
  std::string error;

  bool load(std::size_t i) {
    if (i == index) return true;
    table = HistogramTable{};
    index = std::size_t(-1);
    if (!(*fill)(i, &table, &error)) return false;
    const auto& shape = (*shapes)[i];
    const auto rows = std::size_t(shape.rows), bins = std::size_t(shape.bins);
    if (table.amax.empty()) {  // not measured
      table.amax.assign(rows, std::numeric_limits<double>::quiet_NaN());
      for (auto& counts : table.precision) counts.assign(rows, -1);
    }
    bool sized = table.steps.size() == rows && table.counts.size() == rows * bins &&
                 table.edges.size() == rows * (bins + 1) && table.amax.size() == rows;
    for (const auto& counts : table.precision) sized = sized && counts.size() == rows;
    if (!sized) {
      error = "the histograms of '" + shape.name + "' changed while they were written";
      return false;
    }
    index = i;
    return true;
  }
};

// One storage record of a series as a libzip source.
struct RecordSource {
  SeriesCache* cache;
  std::size_t series;
  int part;  // 0 steps, 1 counts, 2 edges, 3 amax, 4-7 the precision counts
  std::uint64_t size;
  std::uint64_t offset = 0;
  zip_error_t error;

  const char* bytes() const {
    const auto& t = cache->table;
    switch (part) {
      case 0: return reinterpret_cast<const char*>(t.steps.data());
      case 1: return reinterpret_cast<const char*>(t.counts.data());
      case 2: return reinterpret_cast<const char*>(t.edges.data());
      case 3: return reinterpret_cast<const char*>(t.amax.data());
      default: return reinterpret_cast<const char*>(t.precision[std::size_t(part - 4)].data());
    }
  }
};

zip_int64_t recordCallback(void* state, void* data, zip_uint64_t length, zip_source_cmd_t command) {
  auto* source = static_cast<RecordSource*>(state);
  switch (command) {
    case ZIP_SOURCE_OPEN:
      source->offset = 0;
      if (!source->cache->load(source->series)) {
        zip_error_set(&source->error, ZIP_ER_READ, 0);
        return -1;
      }
      return 0;
    case ZIP_SOURCE_READ: {
      const std::uint64_t n = std::min<std::uint64_t>(length, source->size - source->offset);
      if (n) std::memcpy(data, source->bytes() + source->offset, std::size_t(n));
      source->offset += n;
      return zip_int64_t(n);
    }
    case ZIP_SOURCE_CLOSE: return 0;
    case ZIP_SOURCE_STAT: {
      auto* st = static_cast<zip_stat_t*>(data);
      zip_stat_init(st);
      st->size = source->size;
      st->comp_size = source->size;
      st->comp_method = ZIP_CM_STORE;
      st->valid |= ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_COMP_METHOD;
      return sizeof(zip_stat_t);
    }
    case ZIP_SOURCE_ERROR: return zip_error_to_data(&source->error, data, length);
    case ZIP_SOURCE_FREE:
      zip_error_fini(&source->error);
      delete source;
      return 0;
    case ZIP_SOURCE_SUPPORTS:
      return zip_source_make_command_bitmap(ZIP_SOURCE_OPEN, ZIP_SOURCE_READ, ZIP_SOURCE_CLOSE, ZIP_SOURCE_STAT,
                                            ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE, -1);
    default:
      zip_error_set(&source->error, ZIP_ER_OPNOTSUPP, 0);
      return -1;
  }
}

} // namespace

bool writeHistogramsFile(const std::string& path, const std::vector<HistogramShape>& shapes,
                         const std::function<bool(std::size_t, HistogramTable*, std::string*)>& fill,
                         std::string* error) {
  std::string pickled = "\x80\x02}(";
  int key = 0;
  for (const auto& shape : shapes) {
    pickle::putText(pickled, shape.name);
    pickled += "}(";
    pickle::putText(pickled, "steps");
    pickle::putTensor(pickled, "LongStorage", std::to_string(key++), shape.rows, 1, 1);
    pickle::putText(pickled, "counts");
    pickle::putTensor(pickled, "LongStorage", std::to_string(key++), shape.rows, shape.bins, 2);
    pickle::putText(pickled, "edges");
    pickle::putTensor(pickled, "DoubleStorage", std::to_string(key++), shape.rows, shape.bins + 1, 2);
    pickle::putText(pickled, "amax");
    pickle::putTensor(pickled, "DoubleStorage", std::to_string(key++), shape.rows, 1, 1);
    for (const auto& count : kPrecisionCounts) {  // beside each series' histograms, by their names
      pickle::putText(pickled, count.name);
      pickle::putTensor(pickled, "LongStorage", std::to_string(key++), shape.rows, 1, 1);
    }
    pickled += 'u';
  }
  pickled += "u.";
  int code = 0;
  std::unique_ptr<zip_t, ZipCloser> z(zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &code));
  if (!z) {
    zip_error_t e;
    zip_error_init_with_code(&e, code);
    *error = std::string("cannot write ") + path + ": " + zip_error_strerror(&e);
    zip_error_fini(&e);
    return false;
  }
  static const char version[] = "3\n";
  static const char byteorder[] = "little";
  if (!addRecord(z.get(), "data.pkl", pickled.data(), pickled.size(), error) ||
      !addRecord(z.get(), "byteorder", byteorder, sizeof byteorder - 1, error)) {
    return false;
  }
  SeriesCache cache;
  cache.fill = &fill;
  cache.shapes = &shapes;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const auto rows = std::uint64_t(shapes[i].rows), bins = std::uint64_t(shapes[i].bins);
    const std::uint64_t sizes[kRecordsPerSeries] = {rows * 8, rows * bins * 8, rows * (bins + 1) * 8, rows * 8,
                                                    rows * 8, rows * 8, rows * 8, rows * 8};
    for (int part = 0; part < kRecordsPerSeries; ++part) {
      auto* state = new RecordSource{&cache, i, part, sizes[part], 0, {}};
      zip_error_init(&state->error);
      zip_source_t* source = zip_source_function(z.get(), recordCallback, state);
      if (!source) {
        zip_error_fini(&state->error);
        delete state;
        *error = zip_strerror(z.get());
        return false;
      }
      if (!addSourceRecord(z.get(), "data/" + std::to_string(i * kRecordsPerSeries + std::size_t(part)), source, error)) {
        return false;
      }
    }
  }
  if (!addRecord(z.get(), "version", version, sizeof version - 1, error)) return false;
  if (zip_close(z.get()) != 0) {
    *error = cache.error.empty() ? std::string("cannot write ") + path + ": " + zip_strerror(z.get()) : cache.error;
    return false;
  }
  z.release();  // zip_close freed it
  return true;
}

bool writeHistogramsFile(const std::string& path, const HistogramTables& tables, std::string* error) {
  std::vector<HistogramShape> shapes;
  for (const auto& [name, table] : tables) {
    const auto rows = std::int64_t(table.steps.size());
    if (std::int64_t(table.counts.size()) != rows * table.bins || std::int64_t(table.edges.size()) != rows * (table.bins + 1)) {
      *error = "the histograms of '" + name + "' do not have the sizes their steps and bins say";
      return false;
    }
    shapes.push_back({name, rows, table.bins});
  }
  return writeHistogramsFile(path, shapes, [&](std::size_t i, HistogramTable* table, std::string*) {
    *table = tables[i].second;
    return true;
  }, error);
}

bool readHistogramsFile(const std::string& path, const HistogramTableReader& each, std::string* error) {
  if (std::string problem = checkRegularFile(path, "histograms.pt"); !problem.empty()) {
    *error = problem;
    return false;
  }
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  int code = 0;
  std::unique_ptr<zip_t, ZipCloser> z(zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code));
  if (!z || ec) {
    *error = "it is not in torch.save's zip format (damaged, cut short, or not a torch.save file)";
    return false;
  }
  return readZip(z.get(), std::uint64_t(size), path, each, error);
}

bool readHistogramsBytes(const std::string& bytes, const HistogramTableReader& each, std::string* error) {
  zip_error_t e;
  zip_error_init(&e);
  zip_source_t* source = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &e);
  zip_t* raw = source ? zip_open_from_source(source, ZIP_RDONLY | ZIP_CHECKCONS, &e) : nullptr;
  zip_error_fini(&e);
  if (!raw) {
    if (source) zip_source_free(source);
    *error = "it is not in torch.save's zip format (damaged, cut short, or not a torch.save file)";
    return false;
  }
  std::unique_ptr<zip_t, ZipCloser> z(raw);
  return readZip(z.get(), bytes.size(), "histograms.pt", each, error);
}

namespace {

HistogramTableReader keepingIn(HistogramTables* tables) {
  tables->clear();
  return [tables](const std::string& name, const HistogramTable& table) {
    tables->emplace_back(name, table);
    return std::string();
  };
}

} // namespace

bool readHistogramsFile(const std::string& path, HistogramTables* tables, std::string* error) {
  return readHistogramsFile(path, keepingIn(tables), error);
}

bool readHistogramsBytes(const std::string& bytes, HistogramTables* tables, std::string* error) {
  return readHistogramsBytes(bytes, keepingIn(tables), error);
}

} // namespace hookscope
