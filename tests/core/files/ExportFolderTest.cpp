// Export folders: exact round trip, refusal to clobber, and atomicity under write failures.
#include "TestSupport.h"

#include "files/ExportFolder.h"
#include "model/TorchSaveFile.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <sys/wait.h>
#include <unistd.h>
#include <limits>

using namespace hookscope;
namespace fs = std::filesystem;

namespace {

class ExportFolderTest : public ::testing::Test {
protected:
  void SetUp() override {
    m_root = fs::temp_directory_path() / ("hookscope-export-test-" + std::to_string(::getpid()) + "-" +
                                          ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(m_root);
    fs::create_directories(m_root);
  }
  void TearDown() override { fs::remove_all(m_root); }

  static void fillSample(CaptureStore& store) {
    for (int step = 0; step < 3; ++step) {
      TensorStats s;
      s.shape = {8, 3, 4};
      s.dtype = "float32";
      s.numel = 96;
      s.min = -1.0 / 3.0 - step;
      s.max = 2.0 / 7.0 + step;
      s.mean = 0.1 * step + 1e-17;
      s.std = std::sqrt(2.0);
      s.l2norm = 123.456789012345678;
      s.zeroFraction = 1.0 / 96;
      s.nanCount = step;
      s.infCount = 1;
      s.histogram = {1, 2, 3, std::int64_t(89 - 2 * step)};
      s.histLow = s.min;
      s.histHigh = s.max;
      if (step > 0) {  // step 0 as an older script sends it: not measured
        s.amax = s.max + 1.0 / 3.0;
        s.f16Overflow = step;
        s.f16Underflow = 2;
        s.e4m3Underflow = 5 + step;
        s.e5m2Underflow = 3;
      }
      store.add(step, {"layer1.0.conv1", step % 2, CaptureKind::Activation, 0}, s);
      s.min = std::numeric_limits<double>::quiet_NaN();
      store.add(step, {"", 0, CaptureKind::Gradient, 1}, s);
      store.add(step, {"fc.weight", 0, CaptureKind::ParamGrad, 0}, s);
      store.addScalar(step, "loss", 2.5 / (step + 1));
    }
  }

  ExportManifest manifest() const {
    ExportManifest m;
    m.modelFile = "model.pt";
    m.modelSha256 = "abc";
    m.hookscopeVersion = "test";
    m.config.inputSpecs = {"8x3x4"};
    m.steps = 3;
    m.hooked = {{"layer1.0.conv1", {"activation"}}};
    return m;
  }

  fs::path m_root;
};

bool sameDouble(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

TEST_F(ExportFolderTest, RoundTripIsExact) {
  CaptureStore store;
  fillSample(store);
  const std::string dir = (m_root / "export").string();
  std::string error;
  ASSERT_TRUE(writeExport(dir, manifest(), store, {}, {}, &error)) << error;
  std::ifstream csv(m_root / "export" / "stats.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_EQ(header, kStatsCsvHeader);

  ExportData data;
  ASSERT_TRUE(readExport(dir, &data, &error)) << error;
  EXPECT_EQ(data.manifest.modelFile, "model.pt");
  EXPECT_EQ(data.manifest.steps, 3);
  EXPECT_EQ(data.manifest.config.inputSpecs, (std::vector<std::string>{"8x3x4"}));
  ASSERT_EQ(data.store->seriesKeys(), store.seriesKeys());
  for (const auto& key : store.seriesKeys()) {
    const auto expected = store.series(key);
    const auto actual = data.store->series(key);
    ASSERT_EQ(actual.size(), expected.size());
    for (std::size_t i = 0; i < actual.size(); ++i) {
      const auto& a = actual[i].stats;
      const auto& e = expected[i].stats;
      EXPECT_EQ(actual[i].step, expected[i].step);
      EXPECT_EQ(a.shape, e.shape);
      EXPECT_EQ(a.dtype, e.dtype);
      EXPECT_EQ(a.numel, e.numel);
      for (auto [x, y] : {std::pair{a.min, e.min}, {a.max, e.max}, {a.mean, e.mean}, {a.std, e.std},
                          {a.l2norm, e.l2norm}, {a.zeroFraction, e.zeroFraction},
                          {a.histLow, e.histLow}, {a.histHigh, e.histHigh}, {a.amax, e.amax}}) {
        EXPECT_TRUE(sameDouble(x, y)) << x << " != " << y;
      }
      EXPECT_EQ(a.nanCount, e.nanCount);
      EXPECT_EQ(a.infCount, e.infCount);
      EXPECT_EQ(a.hasPrecision(), actual[i].step > 0);
      EXPECT_EQ(std::tie(a.f16Overflow, a.f16Underflow, a.e4m3Underflow, a.e5m2Underflow),
                std::tie(e.f16Overflow, e.f16Underflow, e.e4m3Underflow, e.e5m2Underflow));
      EXPECT_EQ(a.histogram, e.histogram);
    }
  }
  const auto loss = data.store->scalars("loss");
  ASSERT_EQ(loss.size(), 3u);
  EXPECT_EQ(loss[2].value, 2.5 / 3);
}

// An export whose captures would take more memory than the cap (the window's) is read at the
// steps a thinning of the store would keep, and only those are held while reading: the first
// step, every stride-th after it (the stride a doubling of the steps' own spacing), the newest.
// Each step kept is as the whole export has it, histograms included; scalars are all kept. The
// rows of the steps left out are read too (a damaged one is said).
TEST_F(ExportFolderTest, AnExportOverTheCapIsReadAtTheStepsAThinningKeeps) {
  // One name quoted in stats.csv: its rows are read whole, left out or not.
  const auto name = [](int layer) { return layer == 7 ? std::string("blocks.7, \"odd\"") : "blocks." + std::to_string(layer); };
  for (const std::int64_t spacing : {1, 2}) {  // a recording thinned already: steps 0, 2, 4, ...
    CaptureStore store(std::numeric_limits<std::size_t>::max());
    std::vector<std::int64_t> steps;
    for (std::int64_t step = 0; step < 200; step += spacing) steps.push_back(step);
    steps.push_back(steps.back() + 1);  // the newest, off the grid, as a thinned recording ends
    for (const std::int64_t step : steps) {
      for (int layer = 0; layer < 8; ++layer) {
        TensorStats s;
        s.shape = {16, 32};
        s.dtype = "float32";
        s.numel = 512;
        s.min = -1.0 - double(step);
        s.max = 1.0 + double(layer);
        s.mean = 0.001 * double(step * 8 + layer);
        s.histogram.assign(64, 8);
        s.histogram[std::size_t(step % 64)] += layer;
        s.histogram[std::size_t(layer)] -= layer;
        s.histLow = s.min;
        s.histHigh = s.max;
        store.add(step, {name(layer), 0, CaptureKind::Activation, 0}, s);
      }
      store.addScalar(step, "loss", 1.0 / double(step + 1));
    }
    const std::string dir = (m_root / ("export" + std::to_string(spacing))).string();
    std::string error;
    ASSERT_TRUE(writeExport(dir, manifest(), store, {}, {}, &error)) << error;
    ExportData whole;
    ASSERT_TRUE(readExport(dir, &whole, &error)) << error;
    EXPECT_TRUE(whole.store->thinning().empty());
    const std::size_t wholeBytes = whole.store->bytesUsed();

    ExportData roomy;  // a cap it fits under: read whole
    ASSERT_TRUE(readExport(dir, &roomy, &error, 4 * wholeBytes)) << error;
    EXPECT_TRUE(roomy.store->thinning().empty());
    EXPECT_EQ(roomy.store->captureCount(), whole.store->captureCount());

    const std::size_t cap = wholeBytes / 5;
    ExportData part;
    ASSERT_TRUE(readExport(dir, &part, &error, cap)) << error;
    EXPECT_LE(part.store->bytesUsed(), cap);
    const auto thinning = part.store->thinning();
    ASSERT_EQ(thinning.size(), 1u) << spacing;  // chosen before reading, not thinned after reading it all
    const std::int64_t stride = part.store->stride();
    EXPECT_GT(stride, 2 * spacing) << spacing;
    EXPECT_EQ(stride % spacing, 0);
    EXPECT_EQ(stride & (stride - 1), 0) << stride;  // spacings and doublings of 1 and 2
    EXPECT_EQ(thinning.front().stepsBefore, std::int64_t(steps.size()));
    std::vector<std::int64_t> expected;
    for (const std::int64_t step : steps) {
      if (step % stride == 0 || step == steps.back()) expected.push_back(step);
    }
    EXPECT_EQ(thinning.front().stepsAfter, std::int64_t(expected.size()));
    for (int layer = 0; layer < 8; ++layer) {
      const SeriesKey key{name(layer), 0, CaptureKind::Activation, 0};
      const auto got = part.store->series(key);
      const auto all = whole.store->series(key);
      std::vector<std::int64_t> gotSteps;
      for (const auto& point : got) {
        gotSteps.push_back(point.step);
        const auto same = std::find_if(all.begin(), all.end(), [&](const SeriesPoint& p) { return p.step == point.step; });
        ASSERT_NE(same, all.end());
        EXPECT_EQ(point.stats.histogram, same->stats.histogram) << point.step;
        EXPECT_EQ(point.stats.mean, same->stats.mean);
        EXPECT_EQ(point.stats.histLow, same->stats.histLow);
      }
      EXPECT_EQ(gotSteps, expected) << "stride " << stride << ", layer " << layer;
    }
    EXPECT_EQ(part.store->scalars("loss").size(), steps.size());
    // A row of step 1 (left out) without its last field: the export is damaged, read in part or not.
    std::ifstream in(fs::path(dir) / "stats.csv");
    std::stringstream text;
    text << in.rdbuf();
    std::string csv = text.str();
    const auto row = csv.find("\n1,");
    ASSERT_EQ(row == std::string::npos, spacing == 2);
    if (row == std::string::npos) continue;
    const auto lineEnd = csv.find('\n', row + 1);
    csv.erase(csv.rfind(',', lineEnd), lineEnd - csv.rfind(',', lineEnd));
    std::ofstream(fs::path(dir) / "stats.csv", std::ios::trunc) << csv;
    ExportData damaged;
    EXPECT_FALSE(readExport(dir, &damaged, &error, cap));
    EXPECT_NE(error.find("stats.csv line "), std::string::npos) << error;
    EXPECT_NE(error.find(" is damaged"), std::string::npos) << error;
  }
}

// Whatever HookScope writes it reads back: float64 subnormals (std::stod refused 9.99e-321 as out
// of range: "line 3 has a bad number") and names holding a newline, carriage return, comma or
// quote (written quoted across lines: "line 4 is damaged").
TEST_F(ExportFolderTest, SubnormalNumbersAndAnyNameReadBack) {
  CaptureStore store;
  fillSample(store);
  const std::string odd = "blocks.0.\"odd, name\"\nsecond line\r\nthird";
  for (int step = 0; step < 3; ++step) {
    TensorStats s;
    s.shape = {2};
    s.dtype = "float64";
    s.numel = 2;
    s.min = -9.99e-321;
    s.max = std::numeric_limits<double>::denorm_min();
    s.mean = -std::numeric_limits<double>::min() / 4;
    s.std = 1e-310 * (step + 1);
    s.l2norm = 1e-308;
    s.zeroFraction = 0;
    s.histogram = {1, 1};
    s.histLow = s.min;
    s.histHigh = s.max;
    store.add(step, {odd, 0, CaptureKind::Activation, 0}, s);
    store.addScalar(step, "loss,\"by\nhand\"", 1e-320 * (step + 1));
  }
  const std::string dir = (m_root / "export").string();
  std::string error;
  ASSERT_TRUE(writeExport(dir, manifest(), store, {}, {}, &error)) << error;
  ExportData data;
  ASSERT_TRUE(readExport(dir, &data, &error)) << error;
  ASSERT_EQ(data.store->seriesKeys(), store.seriesKeys());
  const auto expected = store.series({odd, 0, CaptureKind::Activation, 0});
  const auto actual = data.store->series({odd, 0, CaptureKind::Activation, 0});
  ASSERT_EQ(actual.size(), 3u);
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const auto& a = actual[i].stats;
    const auto& e = expected[i].stats;
    for (auto [x, y] : {std::pair{a.min, e.min}, {a.max, e.max}, {a.mean, e.mean}, {a.std, e.std},
                        {a.l2norm, e.l2norm}, {a.histLow, e.histLow}, {a.histHigh, e.histHigh}}) {
      EXPECT_EQ(x, y);
    }
    EXPECT_EQ(a.histogram, e.histogram);
  }
  const auto scalars = data.store->scalars("loss,\"by\nhand\"");
  ASSERT_EQ(scalars.size(), 3u);
  EXPECT_EQ(scalars[2].value, 1e-320 * 3);
}

TEST_F(ExportFolderTest, ANumberOutOfDoubleRangeOrWithTrailingTextIsDamage) {
  CaptureStore store;
  fillSample(store);
  const std::string dir = (m_root / "export").string();
  std::string error;
  ASSERT_TRUE(writeExport(dir, manifest(), store, {}, {}, &error)) << error;
  std::ifstream in(m_root / "export" / "stats.csv");
  const std::string original((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto firstRow = original.find('\n') + 1;
  for (const std::string bad : {"1e999", "0.5x", " 0.5", "0x1p-3", ""}) {
    // The row's min (its tenth field) replaced.
    std::string text = original;
    std::size_t at = firstRow;
    for (int comma = 0; comma < 9; ++comma) at = text.find(',', at) + 1;
    text.replace(at, text.find(',', at) - at, bad);
    std::ofstream(m_root / "export" / "stats.csv", std::ios::trunc) << text;
    ExportData data;
    EXPECT_FALSE(readExport(dir, &data, &error)) << "'" << bad << "' was read";
    EXPECT_NE(error.find("stats.csv line 2 has a bad number"), std::string::npos) << error;
  }
}

TEST_F(ExportFolderTest, OnlyAHookScopeExportIsReplacedAndOnlyWhenAsked) {
  CaptureStore store;
  fillSample(store);
  const fs::path dir = m_root / "thesis";
  fs::create_directories(dir / "sub");
  std::ofstream(dir / "thesis.tex") << "precious";
  std::string error;
  for (const bool overwrite : {false, true}) {
    ExportOptions options;
    options.overwrite = overwrite;
    EXPECT_FALSE(writeExport(dir.string(), manifest(), store, {}, options, &error));
    EXPECT_NE(error.find("not a HookScope export"), std::string::npos) << error;
    EXPECT_TRUE(fs::exists(dir / "thesis.tex"));
    EXPECT_TRUE(fs::exists(dir / "sub"));
  }
  const fs::path exportDir = m_root / "export";
  ASSERT_TRUE(writeExport(exportDir.string(), manifest(), store, {}, {}, &error)) << error;
  EXPECT_TRUE(isHookScopeExport(exportDir.string()));
  EXPECT_FALSE(writeExport(exportDir.string(), manifest(), store, {}, {}, &error));
  EXPECT_NE(error.find("already holds a HookScope export"), std::string::npos) << error;
  ExportOptions options;
  options.overwrite = true;
  CaptureStore smaller;
  ASSERT_TRUE(writeExport(exportDir.string(), manifest(), smaller, {}, options, &error)) << error;
  ExportData data;
  ASSERT_TRUE(readExport(exportDir.string(), &data, &error)) << error;
  EXPECT_EQ(data.store->captureCount(), 0u);
  // An empty folder may be written into without asking.
  fs::create_directories(m_root / "empty");
  EXPECT_TRUE(writeExport((m_root / "empty").string(), manifest(), store, {}, {}, &error)) << error;
  // Nothing is left beside the folders: the replaced export was swapped out and removed.
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(m_root)) names.insert(entry.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"empty", "export", "thesis"}));
}

TEST_F(ExportFolderTest, LeftoversOfAnInterruptedWriteAreTidiedOrRestored) {
  CaptureStore store;
  fillSample(store);
  std::string error;
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ASSERT_GT(dead, 0);
  ::waitpid(dead, nullptr, 0);
  const std::string tag = std::to_string(dead);
  // Killed while writing: an incomplete temporary folder.
  const fs::path target = m_root / "run1";
  fs::create_directories(m_root / (".run1.hookscope-tmp-" + tag));
  // Killed by an older HookScope between its two renames: the earlier export set aside.
  ASSERT_TRUE(writeExport((m_root / "aside").string(), manifest(), store, {}, {}, &error)) << error;
  fs::rename(m_root / "aside", m_root / (".run1.hookscope-old-" + tag));
  // A write still in progress elsewhere (our parent process runs): left alone.
  const fs::path live = m_root / (".run1.hookscope-tmp-" + std::to_string(::getppid()));
  fs::create_directories(live);
  const auto notes = recoverInterruptedWrites(target.string());
  ASSERT_EQ(notes.size(), 3u);
  EXPECT_FALSE(fs::exists(m_root / (".run1.hookscope-tmp-" + tag)));
  EXPECT_FALSE(fs::exists(m_root / (".run1.hookscope-old-" + tag)));
  EXPECT_TRUE(isHookScopeExport(target.string())) << "the set-aside export is back under its name";
  EXPECT_TRUE(fs::exists(live));
  std::string all;
  for (const auto& note : notes) all += note + "\n";
  EXPECT_NE(all.find("restored the earlier export"), std::string::npos) << all;
  EXPECT_NE(all.find("removed"), std::string::npos) << all;
  EXPECT_NE(all.find("still running"), std::string::npos) << all;
}

TEST_F(ExportFolderTest, ASecondWriterIsRefusedAtOnceWhileTheFirstHoldsTheFolder) {
  const std::string dir = (m_root / "run").string();
  std::string error;
  auto first = ExportLock::acquire(dir, &error);
  ASSERT_TRUE(first) << error;
  EXPECT_FALSE(ExportLock::acquire(dir, &error));
  EXPECT_NE(error.find("another HookScope process is writing"), std::string::npos) << error;
  CaptureStore store;
  EXPECT_FALSE(writeExport(dir, manifest(), store, {}, {}, &error));
  ExportOptions held;
  held.lockHeld = true;
  EXPECT_TRUE(writeExport(dir, manifest(), store, {}, held, &error)) << error;
  first.reset();
  EXPECT_TRUE(ExportLock::acquire(dir, &error)) << error;
}

TEST_F(ExportFolderTest, TargetsThatCannotBeReplacedAreRefusedWithTheRealReason) {
  std::string error;
  const fs::path file = m_root / "file";
  std::ofstream(file) << "x";
  EXPECT_NE(checkExportTarget(file.string(), true).find("is a file"), std::string::npos);
  fs::create_symlink(m_root, m_root / "link");
  EXPECT_NE(checkExportTarget((m_root / "link").string(), true).find("symbolic link"), std::string::npos);
  // The folder the process is in, even when it is an export.
  CaptureStore store;
  ASSERT_TRUE(writeExport((m_root / "here").string(), manifest(), store, {}, {}, &error)) << error;
  const auto cwd = fs::current_path();
  fs::current_path(m_root / "here");
  const std::string problem = checkExportTarget(".", true);
  fs::current_path(cwd);
  EXPECT_NE(problem.find("holds the current folder"), std::string::npos) << problem;
}

TEST_F(ExportFolderTest, FailureWhileWritingLeavesNothingBehindAndLosesNothing) {
  CaptureStore store;
  fillSample(store);
  const fs::path dir = m_root / "export";
  std::string error;
  for (int failAfter = 0; failAfter < 4; ++failAfter) {
    ExportOptions options;
    options.failAfterFiles = failAfter;
    EXPECT_FALSE(writeExport(dir.string(), manifest(), store, {}, options, &error));
    // Nothing was there before: nothing is said to be "unchanged", and nothing is left.
    EXPECT_NE(error.find("nothing was written to"), std::string::npos) << error;
    EXPECT_FALSE(fs::exists(dir)) << "a half-written folder under the final name";
  }
  // An earlier export survives a failed overwrite untouched.
  ASSERT_TRUE(writeExport(dir.string(), manifest(), store, {}, {}, &error)) << error;
  const auto before = fs::file_size(dir / "stats.csv");
  ExportOptions options;
  options.overwrite = true;
  options.failAfterFiles = 2;
  EXPECT_FALSE(writeExport(dir.string(), manifest(), CaptureStore(), {}, options, &error));
  EXPECT_NE(error.find("is unchanged"), std::string::npos) << error;
  EXPECT_EQ(fs::file_size(dir / "stats.csv"), before);
  ExportData data;
  EXPECT_TRUE(readExport(dir.string(), &data, &error)) << error;
  // No temporary folders are left beside it.
  int entries = 0;
  for (const auto& entry : fs::directory_iterator(m_root)) entries += entry.path() != dir;
  EXPECT_EQ(entries, 0);
}

TEST_F(ExportFolderTest, ReadingSomethingElseSaysWhat) {
  ExportData data;
  std::string error;
  EXPECT_FALSE(readExport((m_root / "nothing").string(), &data, &error));
  EXPECT_NE(error.find("is not a folder"), std::string::npos) << error;
  EXPECT_FALSE(readExport(m_root.string(), &data, &error));
  EXPECT_NE(error.find("no manifest.json"), std::string::npos) << error;
}

TEST(FormatDoubleTest, RoundTripsAndSpellsNonFinite) {
  for (double v : {0.1, 1.0 / 3.0, -2.5e-300, 1e308, 123456789.123456789}) {
    EXPECT_EQ(std::stod(formatDouble(v)), v);
  }
  EXPECT_EQ(formatDouble(std::numeric_limits<double>::quiet_NaN()), "nan");
  EXPECT_EQ(formatDouble(-std::numeric_limits<double>::quiet_NaN()), "nan");
  EXPECT_EQ(formatDouble(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(formatDouble(-std::numeric_limits<double>::infinity()), "-inf");
}

} // namespace

TEST(ConfigHistoryTest, EachChangeClosesTheRecordBeforeIt) {
  std::vector<ConfigRecord> log;
  RunConfig a, b;
  a.inputSpecs = {"4x16"};
  b.inputSpecs = {"8x16"};
  logConfig(&log, a, 0);
  logConfig(&log, a, 3);    // the same again: nothing new
  logConfig(&log, b, 100);
  logConfig(&log, a, 100);  // changed back before any step of b: b is dropped
  logConfig(&log, b, 150);
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].fromStep, 0);
  EXPECT_EQ(log[0].toStep, 149);
  EXPECT_EQ(log[0].config, a);
  EXPECT_EQ(log[1].fromStep, 150);
  EXPECT_EQ(log[1].toStep, -1);
  EXPECT_EQ(log[1].config, b);
}

TEST_F(ExportFolderTest, ConfigurationsAndAlertsComeBackFromTheExport) {
  CaptureStore store;
  fillSample(store);
  ExportManifest m = manifest();
  RunConfig first = m.config, second = m.config;
  first.inputSpecs = {"4x3x4"};
  second.lr = 0.5;
  second.bins = 32;
  m.configurations = {{0, 1, first}, {2, 2, second}};
  Alert alert;
  alert.step = 1;
  alert.module = "fc, \"odd\" name";
  alert.kind = CaptureKind::Gradient;
  alert.rule = RuleKind::ExplodingGradient;
  alert.value = 1234.5;
  alert.message = "gradient norm 1234.5 > 1000, at step 1";
  alert.lastStep = 2;
  alert.count = 2;
  ExportOptions options;
  options.extraFiles = {{"alerts.csv", alertsCsv({alert})}};
  const std::string dir = (m_root / "export").string();
  std::string error;
  ASSERT_TRUE(writeExport(dir, m, store, {}, options, &error)) << error;
  ExportData data;
  ASSERT_TRUE(readExport(dir, &data, &error)) << error;
  ASSERT_EQ(data.manifest.configurations.size(), 2u);
  EXPECT_EQ(data.manifest.configurations[0].config, first);
  EXPECT_EQ(data.manifest.configurations[0].toStep, 1);
  EXPECT_EQ(data.manifest.configurations[1].config, second);
  EXPECT_EQ(data.manifest.configurations[1].fromStep, 2);
  ASSERT_EQ(data.alerts.size(), 1u);
  EXPECT_EQ(data.alerts[0].module, alert.module);
  EXPECT_EQ(data.alerts[0].rule, alert.rule);
  EXPECT_EQ(data.alerts[0].kind, alert.kind);
  EXPECT_EQ(data.alerts[0].value, alert.value);
  EXPECT_EQ(data.alerts[0].message, alert.message);
  EXPECT_EQ(data.alerts[0].lastStep, 2);
  EXPECT_EQ(data.alerts[0].count, 2);
  // A damaged alerts.csv is named, not skipped.
  std::ofstream(m_root / "export" / "alerts.csv", std::ios::app) << "7,fc,gradient,no_such_rule,1,x,7,1\n";
  EXPECT_FALSE(readExport(dir, &data, &error));
  EXPECT_NE(error.find("alerts.csv line 3"), std::string::npos) << error;
}

TEST_F(ExportFolderTest, RanksComeBackFromTheExport) {
  CaptureStore store;
  fillSample(store);  // rank 0
  TensorStats s;
  s.shape = {2};
  s.dtype = "float32";
  s.numel = 2;
  s.min = s.max = s.mean = 0.5;
  s.histogram = {2};
  s.histLow = s.histHigh = 0.5;
  store.add(1, {"layer1.0.conv1", 1, CaptureKind::Activation, 0, 3}, s);
  store.addScalar(1, "loss", 7.25, 3);
  ExportManifest m = manifest();
  ScriptRecord r0, r3;
  r0.name = r3.name = "train.py";
  r0.worldSize = r3.worldSize = 4;
  r0.job = r3.job = "10.0.0.1:29500";
  r3.rank = 3;
  r3.steps = 2;
  r3.ended = "the script disconnected without closing after 2 steps";
  m.script = r0;
  m.ranks = {r0, r3};
  Alert alert;
  alert.step = 1;
  alert.module = "fc.weight";
  alert.kind = CaptureKind::Param;
  alert.rule = RuleKind::RankDivergence;
  alert.value = 0.25;
  alert.rank = 3;
  alert.message = "differs";
  ExportOptions options;
  options.extraFiles = {{"alerts.csv", alertsCsv({alert})}};
  const std::string dir = (m_root / "export").string();
  std::string error;
  ASSERT_TRUE(writeExport(dir, m, store, {}, options, &error)) << error;
  ExportData data;
  ASSERT_TRUE(readExport(dir, &data, &error)) << error;
  EXPECT_EQ(data.manifest.version, ExportManifest::kVersion);
  ASSERT_EQ(data.store->seriesKeys(), store.seriesKeys());
  EXPECT_EQ(data.store->ranks(), (std::vector<int>{0, 3}));
  const SeriesKey ofRank3{"layer1.0.conv1", 1, CaptureKind::Activation, 0, 3};
  ASSERT_EQ(data.store->series(ofRank3).size(), 1u);
  EXPECT_EQ(data.store->series(ofRank3)[0].stats.histogram, (std::vector<std::int64_t>{2}));  // from histograms.pt
  EXPECT_EQ(data.store->scalars("loss", 3).size(), 1u);
  EXPECT_EQ(data.store->scalars("loss", 0).size(), 3u);
  ASSERT_EQ(data.alerts.size(), 1u);
  EXPECT_EQ(data.alerts[0].rank, 3);
  EXPECT_EQ(data.alerts[0].rule, RuleKind::RankDivergence);
  ASSERT_EQ(data.manifest.ranks.size(), 2u);
  EXPECT_EQ(data.manifest.ranks[1].rank, 3);
  EXPECT_EQ(data.manifest.ranks[1].worldSize, 4);
  EXPECT_EQ(data.manifest.ranks[1].job, "10.0.0.1:29500");
  EXPECT_EQ(data.manifest.ranks[1].steps, 2);
  EXPECT_EQ(data.manifest.ranks[1].ended, r3.ended);
}

TEST_F(ExportFolderTest, AVersionOneExportIsReadAndRoundTrips) {
  // Written as HookScope before ranks wrote it.
  const fs::path v1 = m_root / "v1";
  fs::create_directories(v1);
  std::ofstream(v1 / "manifest.json") << R"({"format": "hookscope-capture", "version": 1, "model": {"file": "m.pt",
    "sha256": "ab"}, "steps": 2, "hooked": [{"module": "fc", "kinds": ["activation"]}], "source": "model"})";
  std::ofstream(v1 / "stats.csv") << kStatsCsvHeaderV1 << "\n"
                                  << "0,fc,0,activation,0,2x3,float32,6,-1,2,0.5,1,2.5,0,0,0\n"
                                  << "1,fc,0,activation,0,2x3,float32,6,-2,3,0.25,1.5,3.5,0,1,0\n";
  std::ofstream(v1 / "scalars.csv") << "step,name,value\n0,loss,1.5\n1,loss,1.25\n";
  std::ofstream(v1 / "alerts.csv") << "step,module,kind,rule,value,message,last_step,count\n"
                                   << "1,fc,activation,dead_units,0.95,\"95% zero, fc\",1,1\n";
  {
    // histograms.pt with version 1 keys: "{kind}/{module}/{call}/{index}".
    c10::Dict<std::string, c10::impl::GenericDict> all;
    c10::impl::GenericDict entry(c10::StringType::get(), c10::TensorType::get());
    entry.insert("steps", at::tensor({0, 1}, at::kLong));
    entry.insert("counts", at::tensor({1, 5, 2, 3}, at::kLong).view({2, 2}));
    entry.insert("edges", at::tensor({-1.0, 0.5, 2.0, -2.0, 0.5, 3.0}, at::kDouble).view({2, 3}));
    all.insert("activation/fc/0/0", entry);
    const auto bytes = saveTorchFile(c10::IValue(all));
    std::ofstream(v1 / "histograms.pt", std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  }
  auto check = [](const ExportData& data) {
    const SeriesKey fc{"fc", 0, CaptureKind::Activation, 0, 0};
    ASSERT_EQ(data.store->seriesKeys(), std::vector<SeriesKey>{fc});
    const auto points = data.store->series(fc);
    ASSERT_EQ(points.size(), 2u);
    EXPECT_EQ(points[1].stats.max, 3);
    EXPECT_EQ(points[1].stats.nanCount, 1);
    EXPECT_EQ(points[1].stats.histogram, (std::vector<std::int64_t>{2, 3}));
    EXPECT_EQ(data.store->scalars("loss").size(), 2u);
    ASSERT_EQ(data.alerts.size(), 1u);
    EXPECT_EQ(data.alerts[0].message, "95% zero, fc");
    EXPECT_EQ(data.alerts[0].rank, 0);
  };
  ExportData data;
  std::string error;
  ASSERT_TRUE(readExport(v1.string(), &data, &error)) << error;
  EXPECT_EQ(data.manifest.version, 1);
  check(data);
  // Written again it is the current version and says the same; its series were not measured
  // for low precision, and stay so.
  ExportOptions options;
  options.extraFiles = {{"alerts.csv", alertsCsv(data.alerts)}};
  const std::string again = (m_root / "again").string();
  ASSERT_TRUE(writeExport(again, data.manifest, *data.store, {}, options, &error)) << error;
  ExportData reread;
  ASSERT_TRUE(readExport(again, &reread, &error)) << error;
  EXPECT_EQ(reread.manifest.version, ExportManifest::kVersion);
  check(reread);
  EXPECT_FALSE(reread.store->series(SeriesKey{"fc", 0, CaptureKind::Activation, 0, 0})[1].stats.hasPrecision());
  // A manifest of a later version is refused with what to do.
  std::ofstream(v1 / "manifest.json") << R"({"format": "hookscope-capture", "version": 4, "model": {}})";
  EXPECT_FALSE(readExport(v1.string(), &data, &error));
  EXPECT_NE(error.find("newer HookScope"), std::string::npos) << error;
}
