// The viewer's ingest at full speed (issue 58): a script's wire stream, as the hookscope package
// sends it (a hello of N blocks of Linear + ReLU, each module's activation and gradient declared
// once as a `series` message, then every step's rows as binary frames of float64 rows and the
// step's end), written into a socket as fast as it takes it, and served by AttachJob into a
// capture store with the default rules, as `hookscope-cli record` and the window do. No torch,
// no script: what the viewer's side costs per capture. Prints, for each N: captures a second and
// the serving thread's CPU time per capture. Asserts nothing (scripts/bench.sh).
//   hookscope-ingest-bench [STEPS [N ...]]        (default 200 steps; N 25 100 400 1600)
#include "links/AttachJob.h"
#include "rules/RuleEvaluator.h"
#include "store/CaptureStore.h"
#include "wire/WireFrame.h"

#include <nlohmann/json.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace hookscope;
using json = nlohmann::json;

namespace {

constexpr int kBins = 64;            // the package's default
constexpr int kRowValues = 15 + kBins;  // RowLayout.h's header, then the bins
constexpr std::size_t kRowsPerFrame = 4000;  // the package's STATS_PER_MESSAGE

std::string jsonFrame(const json& message) { return wire::encodeFrame(wire::kJsonFrame, message.dump()); }

// Statistics of 512 values in [-1, 1] (a batch of 16 of Linear(32, 32)): plausible, and valid.
std::vector<double> rowValues(int seed) {
  std::vector<double> row{-1, 1, 0.01 * (seed % 7), 0.5, 11.3, 0, 0, 0, -1, 1, 1, 0, 0, 0, 0};
  for (int bin = 0; bin < kBins; ++bin) row.push_back(8);  // 64 bins of 8: the 512 values
  return row;
}

// One step's frames: its rows, `kRowsPerFrame` to a frame, then its end.
std::string stepFrames(std::uint64_t step, std::uint32_t series) {
  std::string out;
  const std::vector<double> values = rowValues(int(step));
  for (std::uint32_t first = 0; first < series; first += kRowsPerFrame) {
    const auto count = std::uint32_t(std::min<std::size_t>(kRowsPerFrame, series - first));
    std::string payload(16, '\0');
    const std::uint32_t bins = kBins;
    std::memcpy(payload.data(), &step, 8);
    std::memcpy(payload.data() + 8, &count, 4);
    std::memcpy(payload.data() + 12, &bins, 4);
    std::string row(8 + kRowValues * 8, '\0');
    std::memcpy(row.data() + 8, values.data(), kRowValues * 8);
    for (std::uint32_t id = first; id < first + count; ++id) {
      std::memcpy(row.data(), &id, 4);
      payload += row;
    }
    out += wire::encodeFrame(wire::kStatsFrame, payload);
  }
  return out + jsonFrame({{"type", "step"}, {"step", step}, {"scalars", {{"loss", 0.5}}}});
}

// The hello of N blocks, and the `series` message declaring each module's activation and gradient.
std::pair<std::string, std::string> helloAndSeries(int blocks, std::uint32_t* series) {
  json modules = json::array({{{"path", ""}, {"type", "Sequential"}, {"params", blocks * 1056}}});
  for (int b = 0; b < blocks; ++b) {
    const std::string block = std::to_string(b);
    modules.push_back({{"path", block}, {"type", "Sequential"}, {"params", 1056}});
    modules.push_back({{"path", block + ".0"}, {"type", "Linear"}, {"params", 1056}});
    modules.push_back({{"path", block + ".1"}, {"type", "ReLU"}, {"params", 0}});
  }
  json declared = json::array();
  for (int module = 0; module < int(modules.size()); ++module) {
    for (const char* kind : {"activation", "gradient"}) {
      declared.push_back({{"id", declared.size()}, {"module", module}, {"call", 0}, {"kind", kind}, {"index", 0},
                          {"shape", {16, 32}}, {"dtype", "float32"}, {"numel", 512}});
    }
  }
  *series = std::uint32_t(declared.size());
  return {jsonFrame({{"type", "hello"}, {"protocol", wire::kProtocolVersion}, {"name", "ingest_bench.py"},
                     {"modules", modules}}),
          jsonFrame({{"type", "series"}, {"series", declared}})};
}

bool sendAll(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t sent = ::send(fd, data, size, MSG_NOSIGNAL);
    if (sent <= 0) return false;
    data += sent;
    size -= std::size_t(sent);
  }
  return true;
}

double threadCpuSeconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// One replay: the stream made first (not timed), then written by one thread while AttachJob
// serves it on its own.
void replay(int blocks, int steps) {
  std::uint32_t series = 0;
  const auto [hello, declared] = helloAndSeries(blocks, &series);
  std::vector<std::string> frames;
  std::size_t bytes = 0;
  for (int step = 0; step < steps; ++step) {
    frames.push_back(stepFrames(std::uint64_t(step), series));
    bytes += frames.back().size();
  }
  frames.push_back(jsonFrame({{"type", "bye"}, {"steps", steps}}));

  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    std::perror("socketpair");
    std::exit(1);
  }
  auto store = std::make_shared<CaptureStore>();  // the default cap: thinned past it, as record's
  AttachJob job(store);
  job.setBins(kBins);
  job.setRuleSettings(RuleSettings{});
  std::atomic<double> servingCpu{0};
  std::atomic<std::int64_t> stepsSeen{0};
  job.setOnStep([&](int, const AttachedStep& s) {
    stepsSeen = s.step + 1;
    servingCpu = threadCpuSeconds();  // the serving thread's CPU time so far
  });
  std::mutex endedMutex;
  std::string ended;
  job.setOnEnded([&](int, const std::string& why) {
    std::lock_guard<std::mutex> lock(endedMutex);
    ended = why;
    ::shutdown(fds[0], SHUT_RDWR);  // a writer still writing stops (the link ended before the goodbye)
  });
  // The writer: the hello (a model of thousands of modules' is more than a socket takes at once),
  // then, once the link is served, the stream as fast as the socket takes it.
  std::promise<void> served;
  std::atomic<bool> written{false};
  std::thread writer([&, go = served.get_future()]() mutable {
    if (!sendAll(fds[0], hello.data(), hello.size())) return;
    go.wait();
    bool all = sendAll(fds[0], declared.data(), declared.size());
    for (const auto& f : frames) all = all && sendAll(fds[0], f.data(), f.size());
    written = all;
  });
  std::string error;
  auto link = ScriptLink::accept(fds[1], "", false, store, &error);
  if (!link || !job.add(std::move(link), &error)) {
    std::fprintf(stderr, "ingest-bench: %s\n", error.c_str());
    std::exit(1);
  }
  // What the viewer sends back (the welcome, the hooks) is read and let go.
  std::thread drain([fd = fds[0]] {
    char buffer[65536];
    while (::recv(fd, buffer, sizeof buffer, 0) > 0) {
    }
  });
  const auto start = std::chrono::steady_clock::now();
  served.set_value();
  job.waitEnded(600000);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ::shutdown(fds[0], SHUT_RDWR);
  writer.join();
  drain.join();
  ::close(fds[0]);
  const double captures = double(series) * double(steps);
  const double stored = double(store->captureCount());  // fewer where thinning merged steps
  std::printf("RESULT ingest blocks=%d series=%u steps=%d stored=%.0f of %.0f captures MB=%.1f seconds=%.3f "
              "captures_per_s=%.0f serving_cpu_us_per_capture=%.2f%s\n",
              blocks, series, steps, stored, captures, double(bytes) / 1e6, seconds, captures / seconds,
              1e6 * servingCpu.load() / captures, written && stepsSeen == steps ? "" : " (cut short)");
  std::lock_guard<std::mutex> lock(endedMutex);
  if (stepsSeen != steps) std::printf("  the link ended after %lld steps: %s\n", (long long)stepsSeen.load(), ended.c_str());
  std::fflush(stdout);
}

} // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 200;
  std::vector<int> blocks;
  for (int i = 2; i < argc; ++i) blocks.push_back(std::atoi(argv[i]));
  if (blocks.empty()) blocks = {25, 100, 400, 1600};
  if (steps < 1) {
    std::fprintf(stderr, "usage: hookscope-ingest-bench [STEPS [N ...]]\n");
    return 2;
  }
  for (int n : blocks) replay(n, steps);
  return 0;
}
