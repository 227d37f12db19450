// An ScriptLink served on one thread while another sends it commands, as the window does;
// the script is played by hand over a socket pair. Run under ThreadSanitizer by tsan.sh.
#include "wire/AttachListener.h"
#include "links/ScriptLink.h"
#include "wire/WireFrame.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>

using namespace hookscope;
using nlohmann::json;

namespace {

std::string frame(const json& message) { return wire::encodeFrame(wire::kJsonFrame, message.dump()); }

// A script's statistics of one activation of [1, -2, step], as the hookscope package sends them.
std::string activationStats(std::int64_t step, int module) {
  const double top = double(step);
  return frame({{"type", "stats"},
                {"step", step},
                {"captures",
                 {{{"module", module}, {"call", 0}, {"kind", "activation"}, {"index", 0}, {"shape", {3}},
                   {"dtype", "float32"}, {"numel", 3}, {"min", -2.0}, {"max", std::max(1.0, top)},
                   {"mean", (top - 1) / 3}, {"std", 1.0}, {"l2", std::sqrt(5.0 + top * top)}, {"zeros", step == 0 ? 1 / 3.0 : 0},
                   {"nan", 0}, {"inf", 0}, {"hist", {1, 1, 1}}, {"lo", -2.0}, {"hi", std::max(1.0, top)}}}}});
}

} // namespace

TEST(ScriptLinkTest, CommandsFromAnotherThreadWhileServing) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  const int script = fds[0];
  ASSERT_TRUE(sendAll(script, frame({{"type", "hello"},
                                     {"protocol", wire::kProtocolVersion},
                                     {"name", "t.py"},
                                     {"modules", {{{"path", ""}, {"type", "Net"}, {"params", 0}},
                                                  {{"path", "fc"}, {"type", "Linear"}, {"params", 6}}}}})));
  std::string error;
  auto store = std::make_shared<CaptureStore>();
  auto link = ScriptLink::accept(fds[1], "", false, store, &error);
  ASSERT_TRUE(link) << error;
  ASSERT_EQ(link->modules().size(), 2u);
  EXPECT_EQ(link->modules()[0].totalParams, 6);

  // What HookScope sends is read (and counted) as a script would.
  std::atomic<int> acks{0};
  std::thread reader([&] {
    wire::FrameReader in;
    char buffer[4096];
    ssize_t n;
    while ((n = ::read(script, buffer, sizeof buffer)) > 0) {
      in.feed(buffer, std::size_t(n));
      wire::Frame f;
      while (in.next(&f)) {
        if (json::parse(f.payload).value("type", "") == "ack") ++acks;
      }
    }
  });
  std::vector<std::int64_t> seen;
  std::thread server([&] {
    const std::string ended = link->serve([&](const AttachedStep& s) { seen.push_back(s.step); });
    EXPECT_NE(ended.find("closed by the script after 50 steps"), std::string::npos) << ended;
  });
  std::atomic<bool> done{false};
  std::atomic<int> commands{0};
  std::thread window([&] {
    int i = 0;
    while (!done) {
      link->setHooks(1, std::uint8_t(i % 3));
      (i % 2) ? link->pause() : link->resume();
      link->setBreakRules(i % 4 == 0 ? 1u : 0u);
      link->setGradientIntervention(1, {GradientIntervention::Scale, 0.5});
      (void)link->alerts();
      (void)link->interventions();
      ++i;
      ++commands;
    }
  });
  // The steps begin once the window's commands have: on a loaded machine the thread may start
  // after the whole run was served (the test then saw no intervention at all).
  while (commands.load() == 0) std::this_thread::yield();
  for (int step = 0; step < 50; ++step) {
    ASSERT_TRUE(sendAll(script, activationStats(step, 1)));
    ASSERT_TRUE(sendAll(script, frame({{"type", "step"}, {"step", step}, {"scalars", {{"loss", 1.0 / (step + 1)}}}})));
  }
  ASSERT_TRUE(sendAll(script, frame({{"type", "bye"}})));
  server.join();
  done = true;
  window.join();
  ::shutdown(script, SHUT_RDWR);
  reader.join();
  ::close(script);
  ASSERT_EQ(seen.size(), 50u);
  EXPECT_EQ(acks.load(), 50);
  const auto points = store->series({"fc", 0, CaptureKind::Activation, 0});
  ASSERT_EQ(points.size(), 50u);
  EXPECT_DOUBLE_EQ(points[49].stats.max, 49.0);
  EXPECT_DOUBLE_EQ(points[0].stats.l2norm, std::sqrt(5.0));
  EXPECT_EQ(points[0].stats.histogram, (std::vector<std::int64_t>{1, 1, 1}));
  EXPECT_EQ(store->scalars("loss").size(), 50u);
  EXPECT_FALSE(link->interventions().empty());
}

// A weight tied between two modules (an output head and its embedding) is counted once, as
// PyTorch's parameters() counts it, where the script says so; a script that does not (an older
// package) has its own counts added up.
TEST(ScriptLinkTest, TiedParametersAreCountedOnceAndNamed) {
  auto accept = [](const json& modules, std::string* error) {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    EXPECT_TRUE(sendAll(fds[0], frame({{"type", "hello"}, {"protocol", wire::kProtocolVersion}, {"modules", modules}})));
    auto link = ScriptLink::accept(fds[1], "", false, std::make_shared<CaptureStore>(), error);
    ::close(fds[0]);
    return link;
  };
  std::string error;
  auto tied = accept({{{"path", ""}, {"type", "LM"}, {"params", 0}, {"total", 1856}},
                      {{"path", "tok"}, {"type", "Embedding"}, {"params", 1600}, {"total", 1600}},
                      {{"path", "mid"}, {"type", "Linear"}, {"params", 256}, {"total", 256}},
                      {{"path", "head"}, {"type", "Linear"}, {"params", 1600}, {"total", 1600},
                       {"shared", json::array({json::array({"head.weight", "tok.weight"})})}}},
                     &error);
  ASSERT_TRUE(tied) << error;
  EXPECT_EQ(tied->modules()[0].totalParams, 1856);
  EXPECT_EQ(tied->modules()[3].totalParams, 1600);
  ASSERT_EQ(tied->modules()[3].params.size(), 1u);
  EXPECT_EQ(tied->modules()[3].params[0].name, "head.weight");
  EXPECT_EQ(tied->modules()[3].params[0].sharedWith, "tok.weight");
  auto older = accept({{{"path", ""}, {"type", "LM"}, {"params", 0}},
                       {{"path", "tok"}, {"type", "Embedding"}, {"params", 1600}},
                       {{"path", "head"}, {"type", "Linear"}, {"params", 1600}}},
                      &error);
  ASSERT_TRUE(older) << error;
  EXPECT_EQ(older->modules()[0].totalParams, 3200);
}

TEST(ScriptLinkTest, ABadStatsEntryEndsTheSessionWithAMessageToTheScript) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  ASSERT_TRUE(sendAll(fds[0], frame({{"type", "hello"}, {"protocol", wire::kProtocolVersion}, {"modules", {{{"path", ""}, {"type", "M"}}}}})));
  std::string error;
  auto link = ScriptLink::accept(fds[1], "", false, std::make_shared<CaptureStore>(), &error);
  ASSERT_TRUE(link) << error;
  // Statistics of module 7 of a one-module model.
  ASSERT_TRUE(sendAll(fds[0], activationStats(0, 7)));
  const std::string ended = link->serve([](const AttachedStep&) {});
  EXPECT_NE(ended.find("names no module"), std::string::npos) << ended;
  std::string received(1 << 16, '\0');
  const ssize_t n = ::read(fds[0], received.data(), received.size());
  ASSERT_GT(n, 0);
  EXPECT_NE(received.find("names no module"), std::string::npos);
  ::close(fds[0]);
}

namespace {

json engineStats(int module, std::vector<std::int64_t> hist, std::int64_t numel = 6) {
  return {{"module", module}, {"call", 0},     {"kind", "activation"}, {"index", 0},   {"shape", {2, 3}},
          {"dtype", "float32"}, {"numel", numel}, {"min", -2.0},        {"max", "inf"}, {"mean", 0.5},
          {"std", 1.0},       {"l2", 3.0},     {"zeros", 0.25},         {"nan", 1},     {"inf", 1},
          {"hist", hist},     {"lo", -2.0},    {"hi", 1.0}};
}

} // namespace

TEST(ScriptLinkTest, AnEnginesStatisticsAreStoredAndABadEntryEndsTheConnection) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  ASSERT_TRUE(sendAll(fds[0], frame({{"type", "hello"},
                                     {"protocol", wire::kProtocolVersion},
                                     {"engine", {{"model", "/m.pt"}, {"example_input", "2x3"}}},
                                     {"modules", {{{"path", ""}, {"type", "M"}}, {{"path", "fc"}, {"type", "Linear"}}}}})));
  std::string error;
  auto store = std::make_shared<CaptureStore>();
  auto link = ScriptLink::accept(fds[1], "", false, store, &error);
  ASSERT_TRUE(link) << error;
  ASSERT_TRUE(link->engine());
  EXPECT_EQ(link->engine()->exampleInput, "2x3");
  std::vector<std::string> events;
  link->setOnEngineEvent([&](const std::string& event, const std::string& message) { events.push_back(event + message); });
  // Step 0 is good; step 1's histogram counts more values than its tensor holds.
  ASSERT_TRUE(sendAll(fds[0], frame({{"type", "configured"}}) +
                                  frame({{"type", "stats"}, {"step", 0}, {"captures", {engineStats(1, {2, 2})}}}) +
                                  frame({{"type", "step"}, {"step", 0}, {"scalars", {{"loss", 0.5}}}}) +
                                  frame({{"type", "stats"}, {"step", 1}, {"captures", {engineStats(1, {5, 5})}}})));
  std::vector<std::int64_t> steps;
  const std::string ended = link->serve([&](const AttachedStep& s) { steps.push_back(s.step); });
  EXPECT_EQ(steps, std::vector<std::int64_t>{0});
  EXPECT_EQ(events, std::vector<std::string>{"configured"});
  EXPECT_NE(ended.find("histogram counts more values"), std::string::npos) << ended;
  SeriesPoint point;
  ASSERT_TRUE(store->pointAt(SeriesKey{"fc", 0, CaptureKind::Activation, 0, 0}, 0, &point));
  EXPECT_EQ(point.stats.numel, 6);
  EXPECT_TRUE(std::isinf(point.stats.max));
  EXPECT_EQ(point.stats.nanCount, 1);
  EXPECT_EQ(point.stats.histogram, (std::vector<std::int64_t>{2, 2}));
  EXPECT_FALSE(store->pointAt(SeriesKey{"fc", 0, CaptureKind::Activation, 0, 0}, 1, &point) && point.step == 1);
  ::close(fds[0]);
}

namespace {

// A link of a script whose model is a root and one Linear, "fc": fds[0] is the script's end.
void helloOfFcModel(int fds[2], const std::shared_ptr<CaptureStore>& store, std::unique_ptr<ScriptLink>* link) {
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  ASSERT_TRUE(sendAll(fds[0], frame({{"type", "hello"},
                                     {"protocol", wire::kProtocolVersion},
                                     {"modules", {{{"path", ""}, {"type", "M"}}, {{"path", "fc"}, {"type", "Linear"}}}}})));
  std::string error;
  *link = ScriptLink::accept(fds[1], "", false, store, &error);
  ASSERT_TRUE(*link) << error;
}

} // namespace

// amax and the low-precision counts: stored as sent, "not measured" when an older package sends
// none, and a count over the finite values ends the connection.
TEST(ScriptLinkTest, LowPrecisionCountsAreStoredOrRefused) {
  int fds[2];
  auto store = std::make_shared<CaptureStore>();
  std::unique_ptr<ScriptLink> link;
  ASSERT_NO_FATAL_FAILURE(helloOfFcModel(fds, store, &link));
  json measured = engineStats(1, {2, 2});
  measured.update({{"amax", 2.0}, {"f16_overflow", 0}, {"f16_underflow", 1}, {"e4m3_underflow", 2}, {"e5m2_underflow", 1}});
  json tooMany = measured;
  tooMany["e4m3_underflow"] = 5;  // 6 values, one NaN and one Inf: 4 are finite
  ASSERT_TRUE(sendAll(fds[0], frame({{"type", "stats"}, {"step", 0}, {"captures", {measured}}}) +
                                  frame({{"type", "step"}, {"step", 0}}) +
                                  frame({{"type", "stats"}, {"step", 1}, {"captures", {engineStats(1, {2, 2})}}}) +
                                  frame({{"type", "step"}, {"step", 1}}) +
                                  frame({{"type", "stats"}, {"step", 2}, {"captures", {tooMany}}})));
  const std::string ended = link->serve([](const AttachedStep&) {});
  EXPECT_NE(ended.find("e4m3_underflow is missing or over its finite values"), std::string::npos) << ended;
  SeriesPoint point;
  const SeriesKey key{"fc", 0, CaptureKind::Activation, 0, 0};
  ASSERT_TRUE(store->pointAt(key, 0, &point));
  EXPECT_TRUE(point.stats.hasPrecision());
  EXPECT_EQ(point.stats.amax, 2.0);
  EXPECT_EQ(point.stats.f16Underflow, 1);
  EXPECT_EQ(point.stats.e4m3Underflow, 2);
  EXPECT_EQ(point.stats.e5m2Underflow, 1);
  ASSERT_TRUE(store->pointAt(key, 1, &point));
  EXPECT_EQ(point.step, 1);
  EXPECT_FALSE(point.stats.hasPrecision());
  EXPECT_TRUE(std::isnan(point.stats.amax));
  ::close(fds[0]);
}

namespace {

// A binary stats frame (docs/protocol.md): [step][rows][bins], then per row [id][0][values].
std::string statsRows(std::uint64_t step, const std::vector<std::pair<std::uint32_t, std::vector<double>>>& rows,
                      std::uint32_t bins, std::size_t cut = 0) {
  std::string payload(16, '\0');
  const auto count = std::uint32_t(rows.size());
  std::memcpy(payload.data(), &step, 8);
  std::memcpy(payload.data() + 8, &count, 4);
  std::memcpy(payload.data() + 12, &bins, 4);
  for (const auto& [id, values] : rows) {
    std::string row(8 + values.size() * 8, '\0');
    std::memcpy(row.data(), &id, 4);
    std::memcpy(row.data() + 8, values.data(), values.size() * 8);
    payload += row;
  }
  payload.resize(payload.size() - cut);
  return wire::encodeFrame(wire::kStatsFrame, payload);
}

// min, max, mean, std, l2, zeros, NaN, Inf, lo, hi, amax, f16 over/under, e4m3, e5m2, 2 bins.
std::vector<double> row(double firstBin, double secondBin) {
  return {-2, 1, 0.5, 1, 3, 0.25, 1, 0, -2, 1, 2, 0, 0, 1, 0, firstBin, secondBin};
}

} // namespace

// Binary rows name captures declared once in a `series` message; each row is checked as a JSON
// entry is (a histogram of more values than the tensor, an undeclared id, a cut frame: the
// connection ends saying why).
TEST(ScriptLinkTest, BinaryStatsRowsAreStoredOrRefused) {
  const json declared = {{"type", "series"},
                         {"series", {{{"id", 0}, {"module", 1}, {"call", 0}, {"kind", "activation"}, {"index", 0},
                                      {"shape", {2, 3}}, {"dtype", "float32"}, {"numel", 6}}}}};
  const std::pair<std::string, std::string> cases[] = {
      {statsRows(0, {{0, row(2, 3)}}, 2), ""},
      {statsRows(0, {{0, row(5, 5)}}, 2), "histogram counts more values"},
      {statsRows(0, {{1, row(2, 3)}}, 2), "never declared"},
      {statsRows(0, {{0, row(2, 3)}}, 2, 5), "length does not match"},
      {statsRows(3, {{0, row(2, 3)}}, 2), "statistics of step 3 came during step 0"}};
  for (const auto& [frames, problem] : cases) {
    int fds[2];
    auto store = std::make_shared<CaptureStore>();
    std::unique_ptr<ScriptLink> link;
    ASSERT_NO_FATAL_FAILURE(helloOfFcModel(fds, store, &link));
    ASSERT_TRUE(sendAll(fds[0], frame(declared) + frames + frame({{"type", "step"}, {"step", 0}}) +
                                    frame({{"type", "bye"}, {"steps", 1}})));
    const std::string ended = link->serve([](const AttachedStep&) {});
    SeriesPoint point;
    const bool stored = store->pointAt(SeriesKey{"fc", 0, CaptureKind::Activation, 0, 0}, 0, &point);
    if (problem.empty()) {
      ASSERT_TRUE(stored) << ended;
      EXPECT_EQ(point.stats.histogram, (std::vector<std::int64_t>{2, 3}));
      EXPECT_EQ(point.stats.shape, (std::vector<std::int64_t>{2, 3}));
      EXPECT_EQ(point.stats.nanCount, 1);
      EXPECT_EQ(point.stats.e4m3Underflow, 1);
      EXPECT_DOUBLE_EQ(point.stats.zeroFraction, 0.25);
    } else {
      EXPECT_FALSE(stored);
      EXPECT_NE(ended.find(problem), std::string::npos) << ended;
    }
    ::close(fds[0]);
  }
}
