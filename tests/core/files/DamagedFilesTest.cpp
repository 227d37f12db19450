// Damaged, crafted or hostile files: an export folder, a data file or a model archive gives a
// message that says what is wrong, and nothing reads outside a buffer, blocks or explodes.
#include "TestSupport.h"

#include "files/ExportFolder.h"
#include "model/ModelArchiveScan.h"
#include "files/PickleShape.h"
#include "model/TorchSaveFile.h"

#include <ATen/ATen.h>
#include <c10/core/TensorImpl.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include <sys/stat.h>
#include <unistd.h>

using namespace hookscope;
using namespace hookscope::test;
namespace fs = std::filesystem;

namespace {

// A tensor whose sizes claim far more than its 8-byte storage holds, as a tampered file has.
at::Tensor beyondItsStorage(at::ScalarType type, std::vector<std::int64_t> sizes, std::vector<std::int64_t> strides) {
  at::Tensor small = at::zeros({8 / std::int64_t(c10::elementSize(type))}, type);
  at::Tensor t = at::empty({0}, type);
  t.unsafeGetTensorImpl()->set_storage_keep_dtype(small.storage());
  t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides);
  return t;
}

void writeBytes(const fs::path& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

std::vector<char> histogramsWith(const at::Tensor& counts) {
  c10::impl::GenericDict entry(c10::StringType::get(), c10::TensorType::get());
  entry.insert("steps", at::zeros({1}, at::kLong));
  entry.insert("counts", counts);
  entry.insert("edges", at::zeros({1, 65}, at::kDouble));
  c10::impl::GenericDict all(c10::StringType::get(), c10::AnyType::get());
  all.insert("activation/fc/0/0", entry);
  return saveTorchFile(all);
}

struct Damage {
  const char* name;
  std::function<void(const fs::path&)> apply;
  const char* mustSay;
};

void PrintTo(const Damage& damage, std::ostream* out) { *out << damage.name; }

class DamagedExportTest : public ::testing::TestWithParam<Damage> {
protected:
  void SetUp() override {
    m_dir = fs::temp_directory_path() / ("hookscope-damaged-" + std::to_string(::getpid()) + "-" + GetParam().name);
    fs::remove_all(m_dir);
    CaptureStore store;
    TensorStats s;
    s.shape = {4};
    s.numel = 4;
    s.histogram = std::vector<std::int64_t>(64, 1);
    s.histLow = -1;
    s.histHigh = 1;
    store.add(0, {"fc", 0, CaptureKind::Activation, 0}, s);
    ExportManifest manifest;
    manifest.modelFile = "m.pt";
    std::string error;
    ASSERT_TRUE(writeExport(m_dir.string(), manifest, store, {}, {}, &error)) << error;
  }
  void TearDown() override { fs::remove_all(m_dir); }
  fs::path m_dir;
};

TEST_P(DamagedExportTest, SaysWhatIsWrong) {
  GetParam().apply(m_dir);
  ExportData data;
  std::string error;
  EXPECT_FALSE(readExport(m_dir.string(), &data, &error));
  EXPECT_NE(error.find(GetParam().mustSay), std::string::npos) << error;
}

void replaceWithFolder(const fs::path& file) {
  fs::remove(file);
  fs::create_directory(file);
}

INSTANTIATE_TEST_SUITE_P(
    Exports, DamagedExportTest,
    ::testing::Values(
        Damage{"manifest_folder", [](const fs::path& d) { replaceWithFolder(d / "manifest.json"); }, "is a folder"},
        Damage{"histograms_folder", [](const fs::path& d) { replaceWithFolder(d / "histograms.pt"); }, "is a folder"},
        Damage{"histograms_link_to_dev_zero",
               [](const fs::path& d) {
                 fs::remove(d / "histograms.pt");
                 fs::create_symlink("/dev/zero", d / "histograms.pt");
               },
               "symbolic link"},
        Damage{"manifest_fifo",
               [](const fs::path& d) {
                 fs::remove(d / "manifest.json");
                 ::mkfifo((d / "manifest.json").c_str(), 0600);
               },
               "not a regular file"},
        Damage{"histograms_truncated",
               [](const fs::path& d) {
                 const auto size = fs::file_size(d / "histograms.pt");
                 fs::resize_file(d / "histograms.pt", size / 2);
               },
               "histograms.pt cannot be read"},
        Damage{"histograms_not_a_dict",
               [](const fs::path& d) {
                 writeBytes(d / "histograms.pt", saveTorchFile(c10::List<at::Tensor>({at::zeros({2})})));
               },
               "not HookScope's dict"},
        Damage{"counts_beyond_storage",
               [](const fs::path& d) {
                 writeBytes(d / "histograms.pt", histogramsWith(beyondItsStorage(at::kLong, {1000, 1000}, {1000, 1})));
               },
               "storage"},
        Damage{"manifest_nested_100k_deep",
               [](const fs::path& d) {
                 std::ofstream(d / "manifest.json") << "{\"format\":\"hookscope-capture\",\"version\":3,\"modules\":"
                                                    << std::string(100000, '[') << std::string(100000, ']') << "}";
               },
               "deeper than 64 levels"},
        Damage{"stats_cut_at_a_line_end",
               [](const fs::path& d) {
                 std::ifstream in(d / "stats.csv");
                 std::string header;
                 std::getline(in, header);
                 in.close();
                 std::ofstream(d / "stats.csv", std::ios::trunc) << header << "\n";
               },
               "stats.csv is cut before its first row: it holds 0 of the 1 rows"},
        Damage{"scalars_missing", [](const fs::path& d) { fs::remove(d / "scalars.csv"); }, "has no scalars.csv"},
        Damage{"scalars_row_short",
               [](const fs::path& d) { std::ofstream(d / "scalars.csv") << "step,rank,name,value\n0,0,loss\n"; },
               "scalars.csv line 2 has 3 fields where 4 are expected"},
        Damage{"scalars_row_added",
               [](const fs::path& d) { std::ofstream(d / "scalars.csv") << "step,rank,name,value\n0,0,loss,1.5\n"; },
               "holds 1 rows where manifest.json says 0"},
        Damage{"counts_wrong_shape",
               [](const fs::path& d) { writeBytes(d / "histograms.pt", histogramsWith(at::zeros({3}, at::kLong))); },
               "shapes and types of the format"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(TorchSaveFileTest, ATamperedTensorIsRefusedBeforeAnythingReadsIt) {
  const fs::path path = fs::temp_directory_path() / ("hookscope-tampered-" + std::to_string(::getpid()) + ".pt");
  c10::impl::GenericDict dict(c10::StringType::get(), c10::TensorType::get());
  dict.insert("inputs", beyondItsStorage(at::kFloat, {1000, 1000}, {1000, 1}));
  writeBytes(path, saveTorchFile(dict));
  try {
    loadTorchSaveFile(path.string());
    ADD_FAILURE() << "a tensor larger than its storage was accepted";
  } catch (const std::exception& e) {
    // LibTorch 2.x's unpickler checks this itself; HookScope's own check stands behind it.
    EXPECT_NE(std::string(e.what()).find("storage"), std::string::npos) << e.what();
  }
  fs::remove(path);
}

TEST(TorchSaveFileTest, TensorChecksNameWhatIsWrongAndLookInsideNestedValues) {
  // Checked on values in memory as well as through files (the pickler writes what it is given).
  const auto nested = [](const at::Tensor& t) {
    c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
    dict.insert("inputs", c10::ivalue::Tuple::create({at::zeros({2}), c10::List<at::Tensor>({t})}));
    return c10::IValue(dict);
  };
  EXPECT_EQ(checkTensorsInside(nested(at::zeros({3, 4}))), "");
  // (A negative stride cannot reach it: TensorImpl::set_sizes_and_strides, which the unpickler
  // uses, turns one into the contiguous stride.)
  EXPECT_NE(checkTensorsInside(nested(beyondItsStorage(at::kFloat, {1000, 1000}, {1000, 1}))).find("needs more bytes"),
            std::string::npos);
  EXPECT_EQ(checkTensorsInside(nested(beyondItsStorage(at::kFloat, {2, 0}, {1, 1}))), "") << "an empty tensor needs no bytes";
}

TEST(TorchSaveFileTest, ADecompressionBombIsRefusedWithTheLimitAndHowToRaiseIt) {
  try {
    loadTorchSaveFile(fixture("bad/bomb.data.pt"));
    ADD_FAILURE() << "the bomb was read";
  } catch (const std::exception& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("inflates to 300 MiB"), std::string::npos) << message;
    EXPECT_NE(message.find("HOOKSCOPE_MAX_INFLATE_MIB"), std::string::npos) << message;
  }
  ::setenv("HOOKSCOPE_MAX_INFLATE_MIB", "1024", 1);
  EXPECT_NO_THROW(loadTorchSaveFile(fixture("bad/bomb.data.pt")));
  ::unsetenv("HOOKSCOPE_MAX_INFLATE_MIB");
}

// A storage whose pickle claims more bytes than its record in the zip holds would be read past
// its buffer by the first operation (the statistics scan): it is refused with both sizes.
TEST(TorchSaveFileTest, AStorageLargerThanItsRecordIsRefused) {
  try {
    loadTorchSaveFile(fixture("bad/short_storage.data.pt"));
    ADD_FAILURE() << "the short storage was read";
  } catch (const std::exception& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("claims 24 bytes, but its record in the file holds 4"), std::string::npos) << message;
  }
  EXPECT_NO_THROW(loadTorchSaveFile(fixture("bad/plain.data.pt")));
}

TEST(TorchSaveFileTest, DeepNestingAndCyclesAreRefusedBeforeAnythingIsBuilt) {
  for (const auto& [file, expected] : {std::pair{"bad/deep.data.pt", "more than 1000 levels deep"},
                                       std::pair{"bad/cycle.data.pt", "contains itself"},
                                       std::pair{"bad/deep_popped.data.pt", "more than 1000 levels deep"}}) {
    try {
      loadTorchSaveFile(fixture(file));
      ADD_FAILURE() << file << " was read";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << file << ": " << e.what();
    }
  }
}

TEST(PickleShapeTest, MeasuresWhatThePickleWouldBuild) {
  const auto check = [](const std::string& pickle, int depth = kMaxPickleDepth) {
    return checkPickleShape(pickle.data(), pickle.size(), depth);
  };
  // Pickles hold NUL bytes: every literal keeps its whole length.
#define PICKLE(text) std::string(text, sizeof(text) - 1)
  // (Literals are split where a hex escape would swallow the next letter.)
  EXPECT_EQ(check(PICKLE("\x80\x02]q\x00(K\x01K\x02" "e.")), "");  // [1, 2]
  const std::string three = PICKLE("\x80\x02]]]aa.");  // [[[]]]
  EXPECT_EQ(check(three, 3), "");
  EXPECT_NE(check(three, 2).find("more than 2 levels"), std::string::npos);
  // Nested through the memo, after the outer list was built: still counted.
  // a = []; b = []; a.append(b); c = []; b.append(c); the value is a: three deep.
  const std::string aliased = PICKLE("\x80\x02]q\x00]q\x01h\x00h\x01" "a]q\x02h\x01h\x02" "ah\x00.");
  EXPECT_NE(check(aliased, 2).find("more than 2 levels"), std::string::npos);
  EXPECT_EQ(check(aliased, 3), "");
  EXPECT_NE(check(PICKLE("\x80\x02]q\x00h\x00" "a.")).find("contains itself"), std::string::npos);
  // Built but not part of the value, freed all the same: popped, left under the value, kept in
  // the memo.
  for (const std::string& aside : {PICKLE("\x80\x02]]]aa0}."), PICKLE("\x80\x02]]]aa}."), PICKLE("\x80\x02]]]aaq\x00" "0}.")}) {
    EXPECT_NE(check(aside, 2).find("more than 2 levels"), std::string::npos);
    EXPECT_EQ(check(aside, 3), "");
  }
  EXPECT_NE(check(PICKLE("\x80\x02]q\x00h\x00" "a0}.")).find("contains itself"), std::string::npos);
  EXPECT_NE(check(PICKLE("\x80\x02]")).find("truncated"), std::string::npos);
  EXPECT_NE(check(PICKLE("\x80\x02X\xff\xff\xff\x00" "ab.")).find("runs past its end"), std::string::npos);
  EXPECT_NE(check(PICKLE("\x80\x02h\x07.")).find("never wrote"), std::string::npos);
  EXPECT_NE(check(PICKLE("\x80\x02" "a.")).find("damaged"), std::string::npos);
  EXPECT_NE(check(PICKLE("\xff.")).find("unknown opcode 0xff"), std::string::npos);
  // Every fixture torch.save wrote passes.
  for (const char* file : {"teacher.data.pt", "list_inputs.data.pt", "parity_scripted.data.pt"}) {
    EXPECT_NO_THROW(loadTorchSaveFile(fixture(file))) << file;
  }
}
#undef PICKLE

TEST(ModelArchiveScanTest, FindsWhatReachesOutsideAndNothingInPlainModels) {
  const std::string code =
      "class M(Module):\n"
      "  def forward(self: __torch__.M, x: Tensor) -> Tensor:\n"
      "    print(\"step\")\n"
      "    _0 = ops.vision_ops.nms(x, x, 0.5)\n"
      "    _1 = ops.mylib.scale(x, 2.)\n"
      "    _2 = torch.relu(x)\n"
      "    return x\n"
      "  def __setstate__(self: __torch__.M, state: str) -> NoneType:\n"
      "    _3 = torch.from_file(state, True, 8, dtype=0)\n"
      "    return None\n";
  const auto findings = scanModelCode("code/__torch__.py", code, {"mylib"});
  ASSERT_EQ(findings.size(), 4u) << describeFindings(findings);
  EXPECT_EQ(findings[0].line, 3);
  EXPECT_NE(findings[0].what.find("print"), std::string::npos);
  EXPECT_NE(findings[1].what.find("vision_ops::nms"), std::string::npos) << "mylib is loaded, vision_ops is not";
  EXPECT_NE(findings[2].what.find("__setstate__"), std::string::npos);
  EXPECT_NE(findings[3].what.find("torch.from_file"), std::string::npos);
  EXPECT_EQ(findings[3].code, "_3 = torch.from_file(state, True, 8, dtype=0)");

  // torchvision's own Python modules compiled into a file are class paths, in annotations and
  // signatures of scripted and traced files: not operator calls (40 torchvision models were
  // refused for them). A call through torch.ops still is one.
  const std::string classPaths =
      "class ConvNeXt(Module):\n"
      "  features : __torch__.torch.nn.modules.container.Sequential\n"
      "  def forward(self: __torch__.torchvision.models.convnext.ConvNeXt, x: Tensor) -> Tensor:\n"
      "    _0 = __torch__.torchvision.ops.misc.Conv2dNormActivation\n"
      "    _1 = __torch__.torchvision.ops.stochastic_depth.StochasticDepth\n"
      "    _2 = __torch__.torchvision.ops.misc.___torch_mangle_12.Permute\n"
      "    block : __torch__.torchvision.ops.misc.SqueezeExcitation = self.block\n"
      "    _3 = torch.ops.vision_ops.nms(x, x, 0.5)\n"
      "    return x\n";
  const auto classFindings = scanModelCode("code/__torch__/torchvision/models/convnext.py", classPaths);
  ASSERT_EQ(classFindings.size(), 1u) << describeFindings(classFindings);
  EXPECT_NE(classFindings[0].what.find("vision_ops::nms"), std::string::npos);
  EXPECT_EQ(classFindings[0].line, 8);

  // An operator name cut off at the end of a line (found by ModelArchiveFuzz: it threw).
  EXPECT_EQ(scanModelCode("x.py", "  _0 = ops.mylib").size(), 1u);
  EXPECT_EQ(scanModelCode("x.py", "  _0 = ops.").size(), 0u);

  std::vector<ArchiveFinding> found;
  std::string error;
  ASSERT_TRUE(scanModelArchive(fixture("bad/setstate_from_file.pt"), &found, &error)) << error;
  EXPECT_EQ(found.size(), 2u) << describeFindings(found);
  for (const char* plain : {"parity_scripted.pt", "encoder_traced.pt", "attention_scripted.pt", "lstm_scripted.pt"}) {
    ASSERT_TRUE(scanModelArchive(fixture(plain), &found, &error)) << plain << ": " << error;
    EXPECT_TRUE(found.empty()) << plain << ":\n" << describeFindings(found);
  }
  EXPECT_FALSE(scanModelArchive(fixture("bad/not_zip.pt"), &found, &error));
}

// Every torchvision family the scan once refused as untrusted (ConvNeXt, EfficientNet, RegNet,
// Swin, MobileNet, MaxViT, LRASPP), scripted and traced by the PyTorch the engine links: no
// finding. (Code-only archives made by make_fixtures.py when scripts/setup.sh could install
// torchvision beside the venv.)
TEST(ModelArchiveScanTest, TorchvisionModelsScriptedAndTracedHaveNoFindings) {
  const std::filesystem::path folder = fixture("torchvision");
  if (!std::filesystem::is_directory(folder)) GTEST_SKIP() << "no torchvision fixtures (torchvision 0.28 was not installed)";
  int scanned = 0;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    std::vector<ArchiveFinding> found;
    std::string error;
    ASSERT_TRUE(scanModelArchive(entry.path().string(), &found, &error)) << entry.path() << ": " << error;
    EXPECT_TRUE(found.empty()) << entry.path().filename() << ":\n" << describeFindings(found);
    ++scanned;
  }
  EXPECT_GE(scanned, 20);
}

TEST(TorchSaveFileTest, ListsAndOneEntryDictsAreRead) {
  const auto value = loadTorchSaveFile(fixture("list_inputs.data.pt"));
  ASSERT_TRUE(value.isGenericDict());
  const auto dict = value.toGenericDict();
  ASSERT_TRUE(dict.at("inputs").isList());
  EXPECT_EQ(dict.at("inputs").toListRef().size(), 1u);
  EXPECT_EQ(dict.at("note").toListRef()[0].toStringRef(), "one");
}

} // namespace
