#include "links/HelloGate.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <system_error>

namespace hookscope {

namespace {

// The peer's address without its port ("local" for a Unix socket): one machine's connections
// count together.
std::string peerOf(int fd) {
  sockaddr_storage address {};
  socklen_t length = sizeof address;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "?";
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&address)->sin_addr, text, sizeof text);
  } else if (address.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&address)->sin6_addr, text, sizeof text);
  } else {
    return "local";
  }
  return text;
}

} // namespace

HelloGate::HelloGate(std::string token, bool sameUser, std::shared_ptr<CaptureStore> store,
                     std::function<void()> onOutcome, HelloLimits limits)
    : m_token(std::move(token)), m_sameUser(sameUser), m_store(std::move(store)), m_onOutcome(std::move(onOutcome)),
      m_limits(limits) {}

HelloGate::~HelloGate() {
  std::map<std::uint64_t, std::thread> running;
  std::vector<std::thread> finished;
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    for (auto& w : m_waiting) {
      w.closedEarly = true;
      ::shutdown(w.watch, SHUT_RDWR);
    }
    running.swap(m_threads);
    finished.swap(m_finished);
  }
  for (auto& [id, thread] : running) thread.join();
  for (auto& thread : finished) thread.join();
  std::lock_guard<std::mutex> lock(m_mutex);
  joinFinishedLocked(nullptr);  // threads that moved themselves while the others were joined
}

void HelloGate::add(int fd) {
  std::vector<std::thread> finished;
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    joinFinishedLocked(&finished);
    Waiting w;
    w.id = m_nextId++;
    w.peer = peerOf(fd);
    w.watch = ::dup(fd);
    const auto open = [&](const std::string* peer) {
      return std::size_t(std::count_if(m_waiting.begin(), m_waiting.end(), [&](const Waiting& other) {
        return !other.closedEarly && (!peer || other.peer == *peer);
      }));
    };
    if (open(&w.peer) >= m_limits.perPeer) closeOldestLocked(&w.peer);
    if (open(nullptr) >= m_limits.total) closeOldestLocked(nullptr);
    m_waiting.push_back(w);
    // Made under the lock: the thread's last step, which takes it, finds itself in m_threads.
    try {
      m_threads.emplace(w.id, std::thread([this, id = w.id, fd] { read(id, fd); }));
    } catch (const std::system_error&) {  // no thread to be had (a process at its limit): refused
      m_waiting.pop_back();
      ::close(w.watch);
      ::close(fd);
      m_outcomes.push_back(Outcome{nullptr, "HookScope could not start a thread to read this connection", 1});
    }
  }
  for (auto& thread : finished) thread.join();
}

void HelloGate::closeOldestLocked(const std::string* peer) {
  for (auto& w : m_waiting) {
    if (!w.closedEarly && (!peer || w.peer == *peer)) {
      w.closedEarly = true;
      ::shutdown(w.watch, SHUT_RDWR);  // its reader sees the peer close and ends
      return;
    }
  }
}

void HelloGate::read(std::uint64_t id, int fd) {
  std::string error;
  auto link = ScriptLink::accept(fd, m_token, m_sameUser, m_store, &error, m_limits.helloMs);
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    const auto me = std::find_if(m_waiting.begin(), m_waiting.end(), [&](const Waiting& w) { return w.id == id; });
    const bool closedEarly = me != m_waiting.end() && me->closedEarly;
    if (me != m_waiting.end()) {
      ::close(me->watch);
      m_waiting.erase(me);
    }
    if (link && closedEarly) link.reset();  // a hello that came as it was closed: gone with it
    if (link) {
      m_outcomes.push_back(Outcome{std::move(link), "", 1});
    } else if (!closedEarly) {
      if (!m_outcomes.empty() && !m_outcomes.back().link && m_outcomes.back().refusal == error) {
        ++m_outcomes.back().count;
      } else {
        m_outcomes.push_back(Outcome{nullptr, error, 1});
      }
    }
    if (const auto self = m_threads.find(id); self != m_threads.end()) {
      m_finished.push_back(std::move(self->second));
      m_threads.erase(self);
    }
  }
  m_ready.notify_all();
  if (m_onOutcome) m_onOutcome();
}

std::optional<HelloGate::Outcome> HelloGate::next(int timeoutMs) {
  std::vector<std::thread> finished;
  std::optional<Outcome> out;
  {
    std::unique_lock<std::mutex> lock(m_mutex);
    m_ready.wait_for(lock, std::chrono::milliseconds(std::max(timeoutMs, 0)), [&] { return !m_outcomes.empty(); });
    joinFinishedLocked(&finished);
    if (!m_outcomes.empty()) {
      out = std::move(m_outcomes.front());
      m_outcomes.pop_front();
    }
  }
  for (auto& thread : finished) thread.join();
  return out;
}

std::size_t HelloGate::waiting() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return std::size_t(std::count_if(m_waiting.begin(), m_waiting.end(), [](const Waiting& w) { return !w.closedEarly; }));
}

void HelloGate::joinFinishedLocked(std::vector<std::thread>* out) {
  if (out) {
    for (auto& thread : m_finished) out->push_back(std::move(thread));
  } else {
    for (auto& thread : m_finished) thread.join();
  }
  m_finished.clear();
}

} // namespace hookscope
