#include "links/EngineProcess.h"

#include "wire/AttachListener.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

namespace hookscope {

namespace {

constexpr std::size_t kKeptErrorBytes = 8192;  // of the head, and of the tail
constexpr std::size_t kMaxLogBytes = 64u << 20;  // of the log file that keeps it whole

bool startsWith(const std::string& text, const char* prefix) { return text.rfind(prefix, 0) == 0; }

std::string privateSocketFolder(std::string* error) {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  std::string base = runtime && *runtime && ::access(runtime, W_OK) == 0 ? runtime : "/tmp";
  std::string pattern = base + "/hookscope-engine-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (!::mkdtemp(buffer.data())) {  // mode 0700
    *error = "cannot make a private folder in " + base + " for the engine's socket: " + std::strerror(errno);
    return "";
  }
  return buffer.data();
}

std::string signalName(int signo) {
  switch (signo) {
    case SIGSEGV: return "SIGSEGV, a crash";
    case SIGABRT: return "SIGABRT, an abort";
    case SIGBUS: return "SIGBUS, a crash";
    case SIGFPE: return "SIGFPE, a crash";
    case SIGILL: return "SIGILL, a crash";
    case SIGKILL: return "SIGKILL";
    case SIGSYS: return "SIGSYS, a forbidden system call";
    case SIGTERM: return "SIGTERM";
    default: return ::strsignal(signo);
  }
}

/// How long an engine that closed its connection (or wrote a hello that is not one) has to end
/// and say why, before it is given up on: its end, not this, is what the wait waits for.
constexpr int kVerdictGraceMs = 60000;

} // namespace

std::string makeEngineScratch(std::string* error) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string folder = tmp && *tmp ? tmp : "/tmp";
  std::string scratch = folder + "/hookscope-engine-XXXXXX";
  if (!::mkdtemp(scratch.data())) {
    *error = "cannot make a scratch folder in " + folder + ": " + std::strerror(errno) +
             ". Set TMPDIR to a folder you can write to.";
    return "";
  }
  return scratch;
}

std::unique_ptr<EngineProcess> EngineProcess::launch(const EngineOptions& options, const std::string& address,
                                                     std::string* error) {
  std::vector<std::string> args = {options.program, "serve", options.model, "--address", address};
  if (options.trust) args.push_back("--trust");
  if (!options.confine) args.push_back("--no-confine");
  for (const auto& library : options.libraries) {
    args.push_back("--load-library");
    args.push_back(library);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The one folder the confined engine may write in (torch.export.load unpacks there), made here
  // and removed by the destructor once the engine is gone.
  const std::string scratch = makeEngineScratch(error);
  if (scratch.empty()) return nullptr;
  std::vector<std::string> environment{"HOOKSCOPE_ENGINE_SCRATCH=" + scratch};
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, "HOOKSCOPE_ENGINE_SCRATCH=", 25) != 0) environment.emplace_back(*e);
  }
  std::vector<char*> envp;
  for (auto& e : environment) envp.push_back(e.data());
  envp.push_back(nullptr);
  int errPipe[2];
  if (::pipe2(errPipe, O_CLOEXEC) != 0) {
    *error = std::string("cannot make a pipe for the engine: ") + std::strerror(errno);
    std::error_code ignored;
    std::filesystem::remove_all(scratch, ignored);
    return nullptr;
  }
  std::unique_ptr<EngineProcess> engine(new EngineProcess());
  engine->m_scratch = scratch;  // removed by the destructor, whatever happens next
  engine->m_pid = ::fork();
  if (engine->m_pid < 0) {
    *error = std::string("cannot start the engine process: ") + std::strerror(errno);
    ::close(errPipe[0]);
    ::close(errPipe[1]);
    return nullptr;
  }
  if (engine->m_pid == 0) {
    // The child: only calls that are safe after fork() in a threaded program. A session of its
    // own, so no controlling terminal (a model's code cannot reach the user's), and standard input
    // from /dev/null: Ctrl+C in a terminal reaches the window (or capture), which ends it as it
    // sees fit.
    ::setsid();
    const int devNull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devNull >= 0) ::dup2(devNull, STDIN_FILENO);  // dup2's copy is not close-on-exec
    ::dup2(errPipe[1], STDERR_FILENO);
    ::execve(argv[0], argv.data(), envp.data());
    const char message[] = "hookscope-cli: cannot run the engine program\n";
    (void)!::write(STDERR_FILENO, message, sizeof message - 1);
    ::_exit(127);
  }
  ::close(errPipe[1]);
  engine->m_echo = options.echoErrors;
  std::error_code ec;
  const auto temp = std::filesystem::temp_directory_path(ec);
  engine->m_logPath = (ec ? std::filesystem::path("/tmp") : temp) / ("hookscope-engine-" + std::to_string(engine->m_pid) + ".log");
  engine->m_errFd = errPipe[0];
  engine->m_errThread = std::thread([raw = engine.get()] { raw->drainErrors(); });
  return engine;
}

EngineProcess::Connection EngineProcess::awaitConnection(AttachListener& listener, const std::string& folder,
                                                         const std::function<bool()>& cancelled, int timeoutMs,
                                                         const std::string& limitName) {
  const auto started = std::chrono::steady_clock::now();
  auto timeLeft = [&]() -> int {
    if (timeoutMs < 0) return 200;
    const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
    return int(std::max<std::int64_t>(0, timeoutMs - spent.count()));
  };
  // The engine connects at once, then loads the model (which may take long, or never end),
  // then says hello.
  Connection c;
  auto fail = [&](bool ended, std::string why) {
    if (c.fd >= 0) ::close(c.fd);
    c.fd = -1;
    c.ended = ended;
    c.why = std::move(why);
    return c;
  };
  while (true) {
    if (cancelled && cancelled()) return fail(false, "Opening the model was cancelled.");
    if (wait(0)) {
      wait(-1);
      return fail(true, std::string());
    }
    const int left = timeLeft();
    if (left == 0) {
      return fail(false, "The model did not open within " + std::to_string(timeoutMs / 1000) + " s (" + limitName +
                             "), so HookScope stopped the engine: its loading code may never end (a __setstate__ "
                             "that loops). If the model is just large, or the machine busy, raise that limit.");
    }
    if (c.fd < 0) {
      c.fd = listener.accept(std::min(left, 200));
      if (c.fd >= 0 && !peerIsSameUser(c.fd)) {
        ::close(c.fd);
        c.fd = -1;
      }
      if (c.fd >= 0) {
        // Both ends are connected: the socket's name is no longer needed, so a viewer killed
        // while its engine loads a model (which may take long) leaves no folder behind.
        std::error_code ignored;
        std::filesystem::remove_all(folder, ignored);
      }
      continue;
    }
    pollfd p{c.fd, POLLIN, 0};
    if (::poll(&p, 1, std::min(left, 200)) > 0) return c;  // the hello (or the engine hung up)
  }
}

std::unique_ptr<EngineProcess> EngineProcess::start(const EngineOptions& options, std::shared_ptr<CaptureStore> store,
                                                    const std::function<bool()>& cancelled, int timeoutMs,
                                                    std::string* error, bool* needsTrust, const std::string& limitName) {
  if (needsTrust) *needsTrust = false;
  const std::string folder = privateSocketFolder(error);
  if (folder.empty()) return nullptr;
  struct RemoveFolder {
    std::string path;
    ~RemoveFolder() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } removeFolder{folder};
  const std::string address = "unix:" + folder + "/engine.sock";
  auto listener = AttachListener::open(address, error);
  if (!listener) return nullptr;
  auto engine = launch(options, address, error);
  if (!engine) return nullptr;

  // An engine that ended before its hello: why, and whether it only asks for trust.
  auto ended = [&]() -> std::unique_ptr<EngineProcess> {
    engine->awaitErrors(kVerdictGraceMs);  // all it wrote before it ended, not what the reader had so far
    if (needsTrust && engine->exitCode() == kEngineNeedsTrust) {
      *needsTrust = true;
      *error = engine->findings();
      engine->m_logSaid = true;  // the findings are all it wrote: no log is left behind
    } else {
      *error = engine->couldNotOpen(options.model);
    }
    return nullptr;
  };
  auto giveUp = [&](const std::string& why) -> std::unique_ptr<EngineProcess> {
    engine->kill();
    engine->wait(-1);
    *error = why;
    const std::string printed = engine->errorOutput();
    if (!printed.empty()) *error += "\nThe engine said:\n" + printed;
    return nullptr;
  };
  const Connection connection = engine->awaitConnection(*listener, folder, cancelled, timeoutMs, limitName);
  if (connection.fd < 0) return connection.ended ? ended() : giveUp(connection.why);
  std::string message;
  auto link = ScriptLink::accept(connection.fd, "", true, std::move(store), &message, 10000);
  if (!link) {
    // Most often the engine ended before its hello: it could not load the model (or refused its
    // code), and said why. Its socket closes before the process is gone (a Python engine's exit
    // can take seconds on a busy machine): its own verdict is awaited, so the exit code says the
    // cause (a refusal, a load failure), never how fast the process ended.
    if (engine->wait(kVerdictGraceMs)) return ended();
    return giveUp("The engine's hello was refused: " + message);
  }
  if (!link->engine()) return giveUp("The program at " + options.program + " is not a HookScope engine.");
  engine->m_link = std::move(link);
  return engine;
}

std::string EngineProcess::findings() const {
  // "hookscope-cli: MODEL holds code that ...:\n<findings>Load it only if ..."; the window words
  // the question itself.
  std::string printed = errorOutput();
  const auto first = printed.find(":\n");
  if (first != std::string::npos) printed.erase(0, first + 2);
  const auto advice = printed.rfind("Load it only if");
  if (advice != std::string::npos) printed.erase(advice);
  return printed;
}

std::string EngineProcess::couldNotOpen(const std::string& model) const {
  // What the engine printed is the reason ("hookscope-cli: LibTorch could not load ..."); how the
  // process ended matters only when it printed nothing, or crashed.
  std::string printed = errorOutput();
  const std::string prefix = "hookscope-cli: ";
  for (std::size_t at = printed.find(prefix); at != std::string::npos; at = printed.find(prefix, at)) {
    printed.erase(at, prefix.size());
  }
  if (printed.empty() || (failed() && exitCode() < 0)) {
    return "HookScope could not open " + model + ": the engine process that loads it " + exitText() + "." +
           (printed.empty() ? "" : "\n" + failureText());
  }
  return "HookScope could not open " + model + ":\n" + printed;
}

std::string firstMeaningfulLine(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    std::string line = text.substr(at, end - at);
    at = end + 1;
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    lines.push_back(line.substr(first));
  }
  // What says what went wrong, in the order a reader would look for it.
  for (const char* mark : {"ERROR: ", "what():", "hookscope-cli: ", "runtime error:", "Error", "error:"}) {
    for (const auto& line : lines) {
      if (line.find(mark) != std::string::npos) return line;
    }
  }
  for (const auto& line : lines) {
    // Not a frame of a stack trace ("#13 0x7f… in …", "0x… in …"), a banner or a separator.
    if (line[0] == '#' || startsWith(line, "0x") || line.find_first_not_of("=-_*") == std::string::npos) continue;
    return line;
  }
  return lines.empty() ? "" : lines.front();
}

EngineProcess::~EngineProcess() {
  m_link.reset();  // the engine sees its connection close and ends
  if (!wait(2000)) {
    kill();
    wait(-1);
  }
  if (m_errThread.joinable()) m_errThread.join();
  if (m_errFd >= 0) ::close(m_errFd);
  if (m_log) std::fclose(m_log);
  // The log is kept for an engine that failed when a message pointed at it (failureText); not
  // for one that asked for trust, whose findings were said in full, nor for one whose own last
  // word was passed on as it was (a model that cannot load): no file is left that no one named.
  if (!m_logPath.empty() && (!failed() || m_logSaid || !m_logPointed)) std::remove(m_logPath.c_str());
  std::error_code ignored;
  if (!m_scratch.empty()) std::filesystem::remove_all(m_scratch, ignored);
}

std::string EngineProcess::errorSummary() const { return firstMeaningfulLine(errorOutput()); }

std::string EngineProcess::logPath() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_logged ? m_logPath : "";
}

std::string EngineProcess::failureText() const {
  std::string text = errorSummary();
  const std::string log = logPath();
  if (!log.empty()) {
    text += (text.empty() ? "" : " ") + std::string("(its whole output: ") + log + ")";
    m_logPointed = true;
  }
  return text;
}

void EngineProcess::kill() {
  std::lock_guard<std::mutex> lock(m_mutex);
  if (m_pid > 0 && !m_reaped) {
    m_killed = true;
    ::kill(m_pid, SIGKILL);
  }
}

bool EngineProcess::wait(int timeoutMs) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(0, timeoutMs));
  while (true) {
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      if (m_reaped || m_pid <= 0) return true;
      int status = 0;
      const pid_t got = ::waitpid(m_pid, &status, WNOHANG);
      if (got == m_pid) {
        m_status = status;
        m_reaped = true;
        return true;
      }
      if (got < 0 && errno != EINTR) {
        m_reaped = true;  // not ours any more
        return true;
      }
    }
    if (timeoutMs >= 0 && std::chrono::steady_clock::now() >= deadline) return false;
    ::usleep(10000);
  }
}

std::string EngineProcess::exitText() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  if (!m_reaped) return "";
  if (WIFSIGNALED(m_status)) {
    const int signo = WTERMSIG(m_status);
    if (signo == SIGKILL && m_killed) return "was stopped by HookScope";
    return "was killed by signal " + std::to_string(signo) + " (" + signalName(signo) + ")";
  }
  return "exited with code " + std::to_string(WEXITSTATUS(m_status));
}

bool EngineProcess::failed() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  if (!m_reaped) return false;
  if (WIFSIGNALED(m_status)) return !(WTERMSIG(m_status) == SIGKILL && m_killed);
  return WEXITSTATUS(m_status) != 0;
}

int EngineProcess::exitCode() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_reaped && WIFEXITED(m_status) ? WEXITSTATUS(m_status) : -1;
}

std::string EngineProcess::errorOutput() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  std::string out = m_errorHead;
  if (m_errorsLeftOut) out += "\n… (" + std::to_string(m_errorsLeftOut) + " bytes left out) …\n";
  out += m_errors;
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

void EngineProcess::awaitErrors(int timeoutMs) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  while (!m_errorsEnded.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void EngineProcess::drainErrors() {
  char buffer[4096];
  while (true) {
    const ssize_t n = ::read(m_errFd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      m_errorsEnded = true;
      return;
    }
    // Also on the window's own standard error, where a developer looks.
    if (m_echo) (void)!::write(STDERR_FILENO, buffer, std::size_t(n));
    std::lock_guard<std::mutex> lock(m_mutex);
    if (!m_log && !m_logPath.empty()) m_log = std::fopen(m_logPath.c_str(), "we");
    if (m_log && m_logged < kMaxLogBytes) {
      m_logged += std::fwrite(buffer, 1, std::min(std::size_t(n), kMaxLogBytes - m_logged), m_log);
      std::fflush(m_log);
    }
    // The head says what went wrong (a refusal names the file, then lists its findings), the
    // tail how it ended: both are kept, what lies between them is counted.
    std::size_t used = 0;
    if (m_errorHead.size() < kKeptErrorBytes) {
      used = std::min(std::size_t(n), kKeptErrorBytes - m_errorHead.size());
      m_errorHead.append(buffer, used);
    }
    m_errors.append(buffer + used, std::size_t(n) - used);
    if (m_errors.size() > kKeptErrorBytes) {
      std::size_t cut = m_errors.size() - kKeptErrorBytes;
      const auto newline = m_errors.find('\n', cut);
      if (newline != std::string::npos) cut = newline + 1;
      m_errorsLeftOut += cut;
      m_errors.erase(0, cut);
    }
  }
}

} // namespace hookscope
