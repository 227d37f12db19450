// A model file run out of the window's process (`hookscope-cli serve`, EngineProcess): the
// numbers equal the in-process engine's, a model that cannot load says why, the confined
// engine cannot write the user's files, and a step that never ends is ended by killing it.
#include "links/AttachJob.h"
#include "links/EngineProcess.h"
#include "files/ExportManifest.h"
#include "run/StepRunner.h"
#include "TestSupport.h"

#include <algorithm>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <thread>

#include <sys/stat.h>

using namespace hookscope;
using hookscope::test::fixture;
using hookscope::test::sampleModel;

namespace {

EngineOptions engineFor(const std::string& model) {
  EngineOptions options;
  options.program = HOOKSCOPE_CLI_PATH;
  options.model = model;
  return options;
}

/// Waits until `done` holds or `seconds` pass.
bool waitFor(const std::function<bool()>& done, double seconds = 60) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

RunConfig cnnConfig() {
  RunConfig config;
  config.inputSpecs = {"8x1x28x28"};
  config.optimizer = OptimizerKind::Sgd;
  config.lr = 0.05;
  config.seed = 3;
  return config;
}

} // namespace

TEST(EngineProcessTest, AModelRunInTheEngineProcessGivesTheInProcessNumbers) {
  const std::string path = sampleModel("small_cnn.pt");
  const std::uint8_t mask = kindBit(CaptureKind::Activation) | kindBit(CaptureKind::Gradient) |
                            kindBit(CaptureKind::ParamGrad);
  // In process, as before.
  std::string error;
  auto model = Model::load(path, &error);
  ASSERT_TRUE(model) << error;
  for (std::size_t i = 0; i < model->modules().size(); ++i) model->setHooks(int(i), mask);
  auto local = std::make_shared<CaptureStore>();
  StepRunner runner(*model, local);
  ASSERT_TRUE(runner.configure(cnnConfig(), &error)) << error;
  StepResult result;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(runner.step(&result, &error)) << error;

  // In an engine process, through the wire.
  auto store = std::make_shared<CaptureStore>();
  auto engine = EngineProcess::start(engineFor(path), store, nullptr, 60000, &error);
  ASSERT_TRUE(engine) << error;
  auto link = engine->takeLink();
  ASSERT_TRUE(link->engine());
  EXPECT_EQ(link->engine()->model, path);
  EXPECT_NE(link->engine()->confinement.find("no file writes"), std::string::npos) << link->engine()->confinement;
  EXPECT_EQ(link->modules().size(), model->modules().size());
  std::vector<std::string> events;
  std::mutex eventsMutex;
  AttachJob job(store);
  job.setOnEngineEvent([&](int, const std::string& event, const std::string& message) {
    std::lock_guard<std::mutex> lock(eventsMutex);
    events.push_back(event + (message.empty() ? "" : ": " + message));
  });
  job.pause();  // an engine waits for Run
  job.setAllHooks(std::vector<std::uint8_t>(model->modules().size(), mask));
  ASSERT_TRUE(job.add(std::move(link), &error)) << error;
  job.configure(runConfigText(cnnConfig()));
  job.step(3);
  ASSERT_TRUE(waitFor([&] { return job.settledStep() >= 2; })) << "settled " << job.settledStep();
  {
    std::lock_guard<std::mutex> lock(eventsMutex);
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.front(), "configured");
  }
  const auto keys = local->seriesKeys();
  ASSERT_GT(keys.size(), 10u);
  EXPECT_EQ(store->seriesKeys().size(), keys.size());
  for (const auto& key : keys) {
    for (std::int64_t step = 0; step < 3; ++step) {
      SeriesPoint a, b;
      ASSERT_TRUE(local->pointAt(key, step, &a));
      ASSERT_TRUE(store->pointAt(key, step, &b)) << key.module << " kind " << int(key.kind) << " step " << step;
      ASSERT_EQ(b.step, step);
      EXPECT_EQ(a.stats.shape, b.stats.shape);
      EXPECT_EQ(a.stats.numel, b.stats.numel);
      EXPECT_TRUE(test::closeRel(a.stats.l2norm, b.stats.l2norm, 1e-5)) << key.module;
      EXPECT_TRUE(test::closeRel(a.stats.mean, b.stats.mean, 1e-5, a.stats.l2norm / std::sqrt(double(a.stats.numel))));
      EXPECT_TRUE(test::closeRel(a.stats.max, b.stats.max, 1e-5, std::fabs(a.stats.min)));
      EXPECT_EQ(a.stats.histogram.size(), b.stats.histogram.size());
      EXPECT_EQ(a.stats.nanCount, b.stats.nanCount);
    }
  }
  const auto losses = store->scalars("loss");
  ASSERT_EQ(losses.size(), 3u);
  EXPECT_TRUE(test::closeRel(losses.back().value, result.loss, 1e-5));
  EXPECT_FALSE(store->scalars("forward_ms").empty());
  // After its three steps the engine says it paused after the last; a window's Stop that
  // reached it between steps ends the run on this.
  ASSERT_TRUE(waitFor([&] {
    std::lock_guard<std::mutex> lock(eventsMutex);
    return std::find(events.begin(), events.end(), "paused: 2") != events.end();
  }));
  job.close();
  EXPECT_TRUE(engine->wait(10000));
  EXPECT_FALSE(engine->failed()) << engine->exitText() << "\n" << engine->errorOutput();
}

TEST(EngineProcessTest, AModelThatCannotLoadSaysWhyAndTheProcessIsGone) {
  std::string error;
  auto engine = EngineProcess::start(engineFor(fixture("bad/truncated.pt")), std::make_shared<CaptureStore>(), nullptr,
                                     60000, &error);
  EXPECT_FALSE(engine);
  EXPECT_EQ(error.rfind("HookScope could not open " + fixture("bad/truncated.pt") + ":\n", 0), 0u) << error;
  EXPECT_NE(error.find("truncated or damaged"), std::string::npos) << error;  // what the engine said
  EXPECT_EQ(error.find("hookscope-cli:"), std::string::npos) << error;  // said as the window's, not the CLI's
}

TEST(EngineProcessTest, AModelThatWritesAFileIsRefusedOrConfined) {
  const std::string victim = fixture("bad/victim.bin");
  auto resetVictim = [&] { std::ofstream(victim, std::ios::binary) << std::string(16, 'A'); };
  auto victimBytes = [&] {
    std::ifstream in(victim, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  // Without the user's word, the engine reads the code and refuses it.
  resetVictim();
  std::string error;
  auto engine = EngineProcess::start(engineFor(fixture("bad/setstate_from_file.pt")), std::make_shared<CaptureStore>(),
                                     nullptr, 60000, &error);
  EXPECT_FALSE(engine);
  EXPECT_NE(error.find("torch.from_file"), std::string::npos) << error;
  EXPECT_EQ(victimBytes(), std::string(16, 'A'));
  // The window asks for trust when the engine says it needs it (exit 9), with its findings alone.
  bool needsTrust = false;
  engine = EngineProcess::start(engineFor(fixture("bad/setstate_from_file.pt")), std::make_shared<CaptureStore>(),
                                nullptr, 60000, &error, &needsTrust);
  EXPECT_FALSE(engine);
  EXPECT_TRUE(needsTrust) << error;
  EXPECT_EQ(error.find("holds code"), std::string::npos) << error;
  EXPECT_NE(error.find("torch.from_file"), std::string::npos) << error;
  EXPECT_EQ(victimBytes(), std::string(16, 'A'));
  // Trusted, it runs confined: the file cannot be opened for writing, so it stays as it was.
  auto options = engineFor(fixture("bad/setstate_from_file.pt"));
  options.trust = true;
  engine = EngineProcess::start(options, std::make_shared<CaptureStore>(), nullptr, 60000, &error);
  EXPECT_FALSE(engine);
  EXPECT_NE(error.find("ermission denied"), std::string::npos) << error;
  EXPECT_NE(error.find("nothing was written"), std::string::npos) << error;
  EXPECT_EQ(victimBytes(), std::string(16, 'A'));
}

TEST(EngineProcessTest, AStepThatNeverEndsIsEndedByKillingTheEngine) {
  auto store = std::make_shared<CaptureStore>();
  std::string error;
  auto engine = EngineProcess::start(engineFor(fixture("bad/forward_forever.pt")), store, nullptr, 60000, &error);
  ASSERT_TRUE(engine) << error;
  AttachJob job(store);
  job.pause();
  ASSERT_TRUE(job.add(engine->takeLink(), &error)) << error;
  RunConfig config;
  config.inputSpecs = {"2x4"};
  job.configure(runConfigText(config));
  job.step(1);
  // The step never ends: the engine neither answers nor ends by itself.
  EXPECT_FALSE(engine->wait(1500));
  EXPECT_EQ(job.settledStep(), -1);
  engine->kill();
  ASSERT_TRUE(engine->wait(10000));
  EXPECT_EQ(engine->exitText(), "was stopped by HookScope");
  EXPECT_TRUE(job.waitEnded(10000));
}

TEST(EngineProcessTest, ACancelledOpenEndsTheEngine) {
  std::string error;
  auto engine = EngineProcess::start(engineFor(sampleModel("small_cnn.pt")), std::make_shared<CaptureStore>(),
                                     [] { return true; }, 60000, &error);
  EXPECT_FALSE(engine);
  EXPECT_NE(error.find("cancelled"), std::string::npos) << error;
}

TEST(EngineProcessTest, ALongMessageKeepsItsFirstLinesAndItsLast) {
  // An engine's refusal names the file first, then lists its findings; a long one (a traced
  // ConvNeXt's ran to 4 KB) lost that first line when only the tail was kept.
  const std::string script = ::testing::TempDir() + "hookscope-long-message.sh";
  {
    std::ofstream out(script);
    out << "#!/bin/sh\nexec 1>&2\necho 'hookscope-cli: FIRST: the model holds code'\n"
           "i=0; while [ $i -lt 400 ]; do echo \"finding $i: a line of about fifty bytes of text\"; i=$((i+1)); done\n"
           "echo 'LAST LINE'\nexit 3\n";
  }
  ASSERT_EQ(::chmod(script.c_str(), 0755), 0);
  EngineOptions options = engineFor(fixture("parity_scripted.pt"));
  options.program = script;
  options.echoErrors = false;
  std::string error;
  auto engine = EngineProcess::start(options, std::make_shared<CaptureStore>(), nullptr, 20000, &error);
  EXPECT_FALSE(engine);
  EXPECT_NE(error.find("FIRST: the model holds code"), std::string::npos) << error.substr(0, 300);
  EXPECT_NE(error.find("LAST LINE"), std::string::npos);
  EXPECT_NE(error.find("bytes left out"), std::string::npos);
  EXPECT_LT(error.size(), 20000u);
  std::remove(script.c_str());
}

// An engine that refuses a model's code closes its connection, then ends with exit 9; a Python
// engine's end can take seconds on a busy machine. The refusal is what is reported, however long
// the end takes (it was "the peer closed the connection before its hello" and exit 3 when it took
// over 2 s): a stand-in engine that connects, writes its refusal, hangs up and ends, at once 50
// times and once 3 s after hanging up.
TEST(EngineProcessTest, AnEngineThatRefusesIsReportedAsARefusalHoweverLongItsEndTakes) {
  const std::string script = ::testing::TempDir() + "hookscope-refusing-engine.py";
  {
    std::ofstream out(script);
    out << "#!" HOOKSCOPE_PYTHON "\n"
           "import socket, sys, time\n"
           "address = sys.argv[sys.argv.index('--address') + 1][len('unix:'):]\n"
           "peer = socket.socket(socket.AF_UNIX)\n"
           "peer.connect(address)\n"
           "sys.stderr.write('hookscope-cli: M holds code that reaches outside the process:\\n  os.system\\n"
           "Load it only if you trust it\\n')\n"
           "sys.stderr.flush()\n"
           "peer.close()\n"
           "time.sleep(float(sys.argv[2]))  # the model's name: how long the end takes\n"
           "sys.exit(9)\n";
  }
  ASSERT_EQ(::chmod(script.c_str(), 0755), 0);
  auto refused = [&](const std::string& endSeconds, std::string* error) {
    EngineOptions options = engineFor(endSeconds);
    options.program = script;
    options.echoErrors = false;
    bool needsTrust = false;
    EXPECT_FALSE(EngineProcess::start(options, std::make_shared<CaptureStore>(), nullptr, -1, error, &needsTrust));
    return needsTrust;
  };
  std::string error;
  EXPECT_TRUE(refused("3", &error)) << error;
  EXPECT_NE(error.find("os.system"), std::string::npos) << error;
  int refusals = 0;
  for (int i = 0; i < 50; ++i) refusals += refused("0", &error) ? 1 : 0;
  EXPECT_EQ(refusals, 50) << error;
  std::remove(script.c_str());
}

// An engine that dies under a sanitizer, or with a native stack trace, is reported by the line
// that says what went wrong, not by the last frame; its whole output stays in a log file.
TEST(EngineProcessTest, ACrashIsSaidByItsErrorLineAndItsWholeOutputIsKept) {
  const std::string asan =
      "=================================================================\n"
      "==4242==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602000000050\n"
      "READ of size 512 at 0x602000000050 thread T0\n"
      "    #0 0x7f0a1 in computeRawStats core/kernels/StatsKernels.cpp:120\n"
      "    #13 0x7f0a2 in libtorch_cpu.so+0x1234\n";
  EXPECT_EQ(firstMeaningfulLine(asan), "==4242==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602000000050");
  EXPECT_EQ(firstMeaningfulLine("terminate called after throwing an instance of 'c10::Error'\n  what():  bad alloc\n#0 0x1\n"),
            "what():  bad alloc");
  EXPECT_EQ(firstMeaningfulLine("\n#1 0x7f in f\nSegmentation fault in the model\n#2 0x8 in g\n"), "Segmentation fault in the model");

  const std::string script = ::testing::TempDir() + "hookscope-crash.sh";
  {
    std::ofstream out(script);
    out << "#!/bin/sh\nexec 1>&2\nprintf '%s' '" << asan << "'\nkill -SEGV $$\n";
  }
  ASSERT_EQ(::chmod(script.c_str(), 0755), 0);
  EngineOptions options = engineFor(fixture("parity_scripted.pt"));
  options.program = script;
  options.echoErrors = false;
  std::string error;
  EXPECT_FALSE(EngineProcess::start(options, std::make_shared<CaptureStore>(), nullptr, 20000, &error));
  EXPECT_NE(error.find("killed by signal 11"), std::string::npos) << error;
  EXPECT_NE(error.find("ERROR: AddressSanitizer: heap-buffer-overflow"), std::string::npos) << error;
  EXPECT_EQ(error.find("#13 0x7f0a2"), std::string::npos) << "a stack frame quoted instead of the error: " << error;
  const auto log = error.find("its whole output: ");
  ASSERT_NE(log, std::string::npos) << error;
  const std::string path = error.substr(log + 18, error.find(')', log) - log - 18);
  std::ifstream kept(path);
  const std::string whole((std::istreambuf_iterator<char>(kept)), std::istreambuf_iterator<char>());
  EXPECT_NE(whole.find("#13 0x7f0a2 in libtorch_cpu.so"), std::string::npos) << path;
  std::remove(path.c_str());
  std::remove(script.c_str());
}

TEST(EngineProcessTest, TheSocketFolderIsGoneOnceTheEngineIsConnected) {
  // A viewer killed while its engine loads a model (which may take long) must leave no
  // hookscope-engine-XXXXXX folder: it goes as soon as both ends are connected.
  const std::string runtime = ::testing::TempDir() + "hookscope-runtime-" + std::to_string(::getpid());
  std::filesystem::create_directories(runtime);
  const char* saved = std::getenv("XDG_RUNTIME_DIR");
  const std::string savedValue = saved ? saved : "";
  ::setenv("XDG_RUNTIME_DIR", runtime.c_str(), 1);
  auto options = engineFor(fixture("bad/setstate_forever.pt"));
  options.trust = true;  // so that it loads, forever
  options.echoErrors = false;
  int entriesWhileLoading = -1;
  const auto started = std::chrono::steady_clock::now();
  std::string error;
  auto engine = EngineProcess::start(
      options, std::make_shared<CaptureStore>(),
      [&] {
        // Asked every 200 ms while the engine loads (forever): cancel once the folder is gone,
        // or after 30 s (the engine connects within a second, a sanitizer build within a few).
        entriesWhileLoading = int(std::distance(std::filesystem::directory_iterator(runtime), {}));
        return entriesWhileLoading == 0 || std::chrono::steady_clock::now() - started > std::chrono::seconds(30);
      },
      60000, &error);
  if (saved) ::setenv("XDG_RUNTIME_DIR", savedValue.c_str(), 1); else ::unsetenv("XDG_RUNTIME_DIR");
  EXPECT_FALSE(engine);
  EXPECT_EQ(entriesWhileLoading, 0) << "the engine's socket folder is still there while it loads";
  std::filesystem::remove_all(runtime);
}
