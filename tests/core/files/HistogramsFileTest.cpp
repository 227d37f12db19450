// histograms.pt written and read without LibTorch: round trips, a series filled while the file
// is written, and what is refused. (PyTorch's own torch.load of it: tests/python/test_cli.py.)
#include "files/HistogramsFile.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

using namespace hookscope;
namespace fs = std::filesystem;

namespace {

fs::path tempFile(const char* name) {
  return fs::temp_directory_path() / ("hookscope-histograms-" + std::to_string(::getpid()) + "-" + name + ".pt");
}

HistogramTable table(std::vector<std::int64_t> steps, std::int64_t bins) {
  HistogramTable t;
  t.steps = std::move(steps);
  t.bins = bins;
  for (std::size_t r = 0; r < t.steps.size(); ++r) {
    for (std::int64_t b = 0; b < bins; ++b) t.counts.push_back(std::int64_t(r) * 100 + b);
    for (std::int64_t b = 0; b <= bins; ++b) t.edges.push_back(-1.5 + double(b) * 0.25 + double(r));
  }
  return t;
}

} // namespace

TEST(HistogramsFileTest, TablesRoundTripWithLargeStepsAndEmptySeries) {
  const fs::path path = tempFile("roundtrip");
  // Steps past 2^31 take the pickle's 8-byte integers; a series with no rows still has its entry.
  const HistogramTables written = {{"rank0/activation/fc/0/0", table({0, 1, 5000000000}, 4)},
                                   {"rank1/gradient//0/1", table({}, 64)},
                                   {"rank0/param/fc.weight/0/0", table({7}, 1)}};
  std::string error;
  ASSERT_TRUE(writeHistogramsFile(path.string(), written, &error)) << error;
  HistogramTables read;
  ASSERT_TRUE(readHistogramsFile(path.string(), &read, &error)) << error;
  ASSERT_EQ(read.size(), written.size());
  for (std::size_t i = 0; i < read.size(); ++i) {
    EXPECT_EQ(read[i].first, written[i].first);
    EXPECT_EQ(read[i].second.steps, written[i].second.steps);
    EXPECT_EQ(read[i].second.bins, written[i].second.bins);
    EXPECT_EQ(read[i].second.counts, written[i].second.counts);
    EXPECT_EQ(read[i].second.edges, written[i].second.edges);
  }
  fs::remove(path);
}

TEST(HistogramsFileTest, AFillThatFailsFailsTheWriteWithItsMessage) {
  const fs::path path = tempFile("fails");
  std::string error;
  const std::vector<HistogramShape> shapes = {{"a", 1, 2}, {"b", 1, 2}};
  EXPECT_FALSE(writeHistogramsFile(path.string(), shapes,
                                   [](std::size_t i, HistogramTable* t, std::string* message) {
                                     if (i == 1) {
                                       *message = "series b is gone";
                                       return false;
                                     }
                                     *t = table({3}, 2);
                                     return true;
                                   },
                                   &error));
  EXPECT_EQ(error, "series b is gone");
  // A series whose values do not match what the file already said of it is refused too.
  EXPECT_FALSE(writeHistogramsFile(path.string(), shapes,
                                   [](std::size_t, HistogramTable* t, std::string*) {
                                     *t = table({3, 4}, 2);
                                     return true;
                                   },
                                   &error));
  EXPECT_NE(error.find("changed while they were written"), std::string::npos) << error;
  fs::remove(path);
}

TEST(HistogramsFileTest, WhatIsNotHistogramsIsRefused) {
  HistogramTables read;
  std::string error;
  EXPECT_FALSE(readHistogramsBytes("", &read, &error));
  EXPECT_NE(error.find("not a torch.save file"), std::string::npos) << error;
  EXPECT_FALSE(readHistogramsBytes(std::string("PK\x03\x04garbage", 11), &read, &error));
  // A real file cut anywhere is refused, never read past.
  const fs::path path = tempFile("cut");
  ASSERT_TRUE(writeHistogramsFile(path.string(), {{"rank0/activation/fc/0/0", table({0, 1}, 8)}}, &error)) << error;
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (std::size_t cut = 0; cut < bytes.size(); cut += 7) {
    EXPECT_FALSE(readHistogramsBytes(bytes.substr(0, cut), &read, &error)) << cut;
  }
  EXPECT_TRUE(readHistogramsBytes(bytes, &read, &error)) << error;
  fs::remove(path);
}
