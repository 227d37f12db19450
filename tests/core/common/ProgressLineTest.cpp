#include "common/ProgressLine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <unistd.h>

using hookscope::ProgressLine;

namespace {

// A file the line writes to, as a log (not a terminal), and what it holds so far.
class LogFile {
public:
  LogFile() : m_path(::testing::TempDir() + "progress-line-" + std::to_string(::getpid()) + ".log") {
    m_file = std::fopen(m_path.c_str(), "w");
  }
  ~LogFile() {
    std::fclose(m_file);
    std::remove(m_path.c_str());
  }
  std::FILE* file() const { return m_file; }
  std::string text() const {
    std::ifstream in(m_path);
    std::stringstream all;
    all << in.rdbuf();
    return all.str();
  }
  // Waits (a minute at most: a busy machine) until the file holds `part`.
  bool waitFor(const std::string& part) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (text().find(part) == std::string::npos) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }

private:
  std::string m_path;
  std::FILE* m_file = nullptr;
};

} // namespace

TEST(ProgressLineTest, WorkDoneWithinItsQuietTimeSaysNothing) {
  LogFile log;
  {
    ProgressLine line("explain", "reading run", log.file(), /*quietSeconds=*/3600);
    line.stage("scoring 3 series over 10 steps");
    line.finish();
  }
  ProgressLine stopped("explain", "reading run", log.file(), 3600);
  stopped.stop();
  EXPECT_EQ(log.text(), "");
}

TEST(ProgressLineTest, PastItsQuietTimeEachStageIsSaidThenWhatItTook) {
  LogFile log;
  ProgressLine line("explain", "reading run", log.file(), /*quietSeconds=*/0);
  ASSERT_TRUE(log.waitFor("explain: reading run... ")) << log.text();
  line.stage("scoring 3 series over 10 steps");
  // A log gets a stage's line as soon as the stage begins, not at the next 10 s.
  ASSERT_TRUE(log.waitFor("explain: scoring 3 series over 10 steps... ")) << log.text();
  line.finish();
  const std::string text = log.text();
  EXPECT_LT(text.find("reading run"), text.find("scoring"));
  EXPECT_NE(text.find("\nexplain: done in "), std::string::npos) << text;
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(text.find('\r'), std::string::npos) << "a log is not redrawn in place";
  line.finish();  // once only
  EXPECT_EQ(log.text(), text);
}

TEST(ProgressLineTest, StoppedBeforeAnErrorItSaysNoMoreAndNamesAreMadePrintable) {
  LogFile log;
  ProgressLine line("report", "reading run\x1b[2J/", log.file(), 0);
  ASSERT_TRUE(log.waitFor("report: reading run\\x1b[2J/... ")) << log.text();
  line.stop();
  const std::string text = log.text();
  EXPECT_EQ(text.find("done"), std::string::npos) << text;
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
}
