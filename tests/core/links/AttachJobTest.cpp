// The ranks of a torch.distributed job served as one (AttachJob), and the rank_divergence rule.
// The job tests run a real 2-rank gloo job (tests/python/attach/ddp_script.py) with the venv's
// PyTorch: a break pauses every rank at the step it fired on, Step moves all by one, Run lets
// the job finish; a pause lines the ranks up at one step.
#include "links/AttachJob.h"
#include "wire/AttachListener.h"
#include "rules/RankDivergence.h"
#include "wire/WireFrame.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <sys/socket.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <thread>

extern char** environ;

using namespace hookscope;
namespace fs = std::filesystem;

namespace {

RankPrints prints(std::vector<std::array<double, 2>> parameters, std::vector<std::array<double, 2>> gradients = {}) {
  return RankPrints{std::move(parameters), std::move(gradients)};
}

const std::vector<std::string> kNames = {"fc1.weight", "fc1.bias", "fc2.weight"};

/// A rank of job "j" (world size 2) whose hello HookScope has read; `*script` is its end.
std::unique_ptr<ScriptLink> helloFromRank(int rank, std::shared_ptr<CaptureStore> store, int* script) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return nullptr;
  *script = fds[0];
  const nlohmann::json hello = {{"type", "hello"},
                                {"protocol", wire::kProtocolVersion},
                                {"name", "t.py"},
                                {"dist", {{"rank", rank}, {"world_size", 2}, {"job", "j"}}},
                                {"modules", {{{"path", ""}, {"type", "Net"}, {"params", 0}}}}};
  if (!sendAll(fds[0], wire::encodeFrame(wire::kJsonFrame, hello.dump()))) return nullptr;
  std::string error;
  return ScriptLink::accept(fds[1], "", false, std::move(store), &error);
}

} // namespace

TEST(AttachJobTest, ARankThatComesAfterCloseIsRefused) {
  // Detach (or the window closing) while the job waits for its other ranks: one that comes
  // later must not be hooked and served by a job that was ended.
  auto store = std::make_shared<CaptureStore>();
  AttachJob job(store);
  int first = -1, late = -1;
  auto rank0 = helloFromRank(0, store, &first);
  ASSERT_TRUE(rank0);
  std::string error;
  ASSERT_TRUE(job.add(std::move(rank0), &error)) << error;
  job.close();
  ASSERT_TRUE(job.waitEnded(10000));
  auto rank1 = helloFromRank(1, store, &late);
  ASSERT_TRUE(rank1);
  EXPECT_FALSE(job.add(std::move(rank1), &error));
  EXPECT_NE(error.find("HookScope is closing"), std::string::npos) << error;
  EXPECT_EQ(job.ranks(), std::vector<int>{0});
  ::close(first);
  ::close(late);
}

TEST(RankDivergenceTest, EqualRanksNeverFire) {
  const auto same = prints({{1.5, 3}, {-0.25, 0.5}, {0, 2}}, {{0.1, 0.2}, {std::nan(""), std::nan("")}, {0, 0}});
  EXPECT_TRUE(rankDivergence(4, kNames, {{0, same}, {1, same}, {2, same}}, 1e-6).empty());
  EXPECT_TRUE(rankDivergence(4, kNames, {{0, same}}, 1e-6).empty());  // one rank: nothing to compare
  EXPECT_EQ(printDifference({0, 0}, {0, 0}), 0);
}

TEST(RankDivergenceTest, NamesTheFirstParameterAndEveryRankThatDiffers) {
  const auto base = prints({{1.5, 3}, {-0.25, 0.5}, {0, 2}});
  auto nudged = base;
  nudged.parameters[1][0] += 1e-3;  // fc1.bias's sum
  nudged.parameters[2][1] += 1.0;   // fc2.weight too, but fc1.bias comes first
  const auto fired = rankDivergence(7, kNames, {{0, base}, {1, base}, {2, nudged}, {3, nudged}}, 1e-6);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].step, 7);
  EXPECT_EQ(fired[0].module, "fc1.bias");
  EXPECT_EQ(fired[0].kind, CaptureKind::Param);
  EXPECT_EQ(fired[0].rule, RuleKind::RankDivergence);
  EXPECT_EQ(fired[0].rank, 2);
  EXPECT_DOUBLE_EQ(fired[0].value, 1e-3 / 0.5);
  EXPECT_NE(fired[0].message.find("ranks 2, 3 from rank 0"), std::string::npos) << fired[0].message;
  // Below the threshold it stays quiet.
  EXPECT_TRUE(rankDivergence(7, kNames, {{0, base}, {2, nudged}}, 10).empty());
}

TEST(RankDivergenceTest, GradientsAndMissingGradients) {
  const std::array<double, 2> none{std::nan(""), std::nan("")};
  const auto a = prints({{1, 1}, {1, 1}, {1, 1}}, {{0.5, 1}, none, {2, 2}});
  auto b = a;
  EXPECT_TRUE(rankDivergence(0, kNames, {{0, a}, {1, b}}, 1e-6).empty());  // both without fc1.bias's gradient
  b.gradients[1] = {0.1, 0.1};  // one rank has a gradient the other has not
  auto fired = rankDivergence(0, kNames, {{0, a}, {1, b}}, 1e-6);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].kind, CaptureKind::ParamGrad);
  EXPECT_EQ(fired[0].module, "fc1.bias");
  EXPECT_TRUE(std::isinf(fired[0].value));
  // A rank whose lists do not match the names is left out rather than misread.
  EXPECT_TRUE(rankDivergence(0, kNames, {{0, a}, {1, prints({{9, 9}})}}, 1e-6).empty());
}

namespace {

// A real DDP job of two ranks, each attached to `job` through a listener.
class RealJob {
public:
  RealJob(AttachJob& job, std::shared_ptr<CaptureStore> store, const std::vector<std::string>& args)
      : m_job(job), m_store(std::move(store)) {
    m_dir = fs::temp_directory_path() / ("hs-job-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(m_dir);
    fs::create_directories(m_dir);
    std::string error;
    m_listener = AttachListener::open("unix:" + (m_dir / "s.sock").string(), &error);
    EXPECT_TRUE(m_listener) << error;
    const std::string address = "HOOKSCOPE_ADDRESS=" + m_listener->address();
    std::vector<std::string> argv = {HOOKSCOPE_PYTHON, HOOKSCOPE_SOURCE_DIR "/tests/python/attach/ddp_script.py",
                                     "--port", std::to_string(20000 + ::getpid() % 20000)};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    std::vector<std::string> env = {address};
    for (char** e = environ; *e; ++e) {
      if (std::string(*e).rfind("HOOKSCOPE_ADDRESS=", 0) != 0) env.emplace_back(*e);
    }
    std::vector<char*> cenv;
    for (auto& e : env) cenv.push_back(e.data());
    cenv.push_back(nullptr);
    EXPECT_EQ(::posix_spawn(&m_pid, cargv[0], nullptr, nullptr, cargv.data(), cenv.data()), 0);
    m_acceptor = std::thread([this] {
      while (!m_stop && m_job.ranks().size() < 2) {
        const int fd = m_listener->accept(100);
        if (fd < 0) continue;
        std::string message;
        auto link = ScriptLink::accept(fd, "", true, m_store, &message);
        if (link) m_job.add(std::move(link), &message);
      }
    });
  }
  ~RealJob() {
    m_stop = true;
    if (m_acceptor.joinable()) m_acceptor.join();
    if (m_pid > 0 && ::waitpid(m_pid, nullptr, WNOHANG) == 0) {
      ::kill(-m_pid, SIGKILL);
      ::kill(m_pid, SIGKILL);
      ::waitpid(m_pid, nullptr, 0);
    }
    fs::remove_all(m_dir);
  }
  /// The job's exit status (waits).
  int exitStatus() {
    int status = 0;
    ::waitpid(m_pid, &status, 0);
    m_pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

private:
  AttachJob& m_job;
  std::shared_ptr<CaptureStore> m_store;
  fs::path m_dir;
  std::unique_ptr<AttachListener> m_listener;
  pid_t m_pid = -1;
  std::atomic<bool> m_stop{false};
  std::thread m_acceptor;
};

bool waitFor(const std::function<bool()>& condition, int seconds = 120) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return condition();
}

std::vector<std::uint8_t> allActivations(std::size_t modules) {
  return std::vector<std::uint8_t>(modules, std::uint8_t(kindBit(CaptureKind::Activation)));
}

} // namespace

TEST(AttachJobTest, ABreakPausesEveryRankAtItsStepStepMovesAllAndRunFinishes) {
  auto store = std::make_shared<CaptureStore>();
  AttachJob job(store);
  job.setBreakRules(1u << unsigned(RuleKind::NonFinite));
  job.setAllHooks(allActivations(11));  // ddp_script's Net has 11 modules
  RealJob real(job, store, {"--steps", "8", "--nan", "1:3"});

  // Rank 1's NaN at step 3 pauses both ranks after step 3, not one of them a step later.
  ASSERT_TRUE(waitFor([&] { return job.pausedSteps().size() == 2; }))
      << "the job did not pause: " << job.ranks().size() << " ranks attached, newest step " << store->latestStep()
      << ", " << job.pausedSteps().size() << " ranks paused";
  EXPECT_EQ(job.pausedSteps(), (std::map<int, std::int64_t>{{0, 3}, {1, 3}}));
  ASSERT_TRUE(job.breakAlert());
  EXPECT_EQ(job.breakAlert()->rule, RuleKind::NonFinite);
  EXPECT_EQ(job.breakAlert()->rank, 1);
  EXPECT_EQ(job.breakAlert()->step, 3);
  EXPECT_EQ(job.breakAlert()->module, "inp");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(store->latestStep(), 3);  // nobody went on

  // Step: every rank runs exactly one more step.
  job.step(1);
  ASSERT_TRUE(waitFor([&] {
    const auto paused = job.pausedSteps();
    return paused.size() == 2 && paused.at(0) == 4 && paused.at(1) == 4;
  })) << "after Step the ranks did not wait at step 4";

  // Run, with the breakpoint off: the job finishes its 8 steps and closes cleanly.
  job.setBreakRules(0);
  job.resume();
  ASSERT_TRUE(job.waitEnded(120000));
  for (const auto& script : job.scripts()) {
    EXPECT_EQ(script.steps, 8) << "rank " << script.rank;
    EXPECT_NE(script.ended.find("closed by the script"), std::string::npos) << script.ended;
  }
  EXPECT_EQ(real.exitStatus(), 0);
  EXPECT_EQ(store->ranks(), (std::vector<int>{0, 1}));
}

TEST(AttachJobTest, APauseLinesTheRanksUpAtOneStep) {
  auto store = std::make_shared<CaptureStore>();
  AttachJob job(store);
  job.setAllHooks(allActivations(11));
  RealJob real(job, store, {"--steps", "300", "--batch", "8", "--sleep", "0.01"});
  ASSERT_TRUE(waitFor([&] { return store->latestStep() >= 5; }));
  for (int round = 0; round < 3; ++round) {
    job.pause();
    ASSERT_TRUE(waitFor([&] {
      const auto paused = job.pausedSteps();
      return paused.size() == 2 && paused.at(0) == paused.at(1);
    })) << "round " << round << ": the ranks did not wait at one step: " << job.pausedSteps().size()
        << " wait, newest step " << store->latestStep() << ", " << job.liveRanks().size() << " attached";
    const auto at = job.pausedSteps().at(0);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_EQ(job.pausedSteps(), (std::map<int, std::int64_t>{{0, at}, {1, at}}));
    job.resume();
    ASSERT_TRUE(waitFor([&] { return store->latestStep() > at + 3; }));
  }
  ASSERT_TRUE(job.waitEnded(120000));
  EXPECT_EQ(real.exitStatus(), 0);
  for (const auto& script : job.scripts()) EXPECT_EQ(script.steps, 300);
}
