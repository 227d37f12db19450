#pragma once
// Hellos read side by side (issue 60): every connection a listener accepts gets a thread of its
// own to prove its token and send its hello within a deadline, so that neither a peer that
// sends a byte a second nor a thousand that send nothing keep a script waiting behind them. At
// most `total` connections wait at once, and `perPeer` of one address; over either, the one of
// them that has waited longest is closed. The header needs no LibTorch.

#include "links/ScriptLink.h"
#include "store/CaptureStore.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace hookscope {

/// How many connections may wait for their hello, and for how long.
struct HelloLimits {
  std::size_t total = 64;     ///< connections waiting for their hello at once
  std::size_t perPeer = 32;   ///< of them, from one address (a Unix socket's peers are one)
  int helloMs = 10000;        ///< the deadline of each for its token and hello
};

class HelloGate {
public:
  /// What came of one connection: a script whose hello was read, or why one was refused
  /// (`count` of them, when several were refused alike before they were taken).
  struct Outcome {
    std::unique_ptr<ScriptLink> link;
    std::string refusal;
    int count = 1;
  };

  /// Links made share `store`; `token` and `sameUser` as ScriptLink::accept takes them.
  /// `onOutcome` runs (on a reader's thread) each time an outcome is ready: e.g. the listener's wake().
  HelloGate(std::string token, bool sameUser, std::shared_ptr<CaptureStore> store,
            std::function<void()> onOutcome = {}, HelloLimits limits = HelloLimits());
  /// Closes every connection still waiting and waits for their threads.
  ~HelloGate();
  HelloGate(const HelloGate&) = delete;
  HelloGate& operator=(const HelloGate&) = delete;

  /// Takes over `fd` (a connection just accepted) and reads its hello on a thread of its own.
  void add(int fd);
  /// The next outcome, waiting up to `timeoutMs` (0: only one ready now); nullopt when none.
  std::optional<Outcome> next(int timeoutMs);
  /// Connections waiting for their hello now.
  std::size_t waiting() const;

private:
  struct Waiting {
    std::uint64_t id = 0;
    int watch = -1;            ///< a duplicate of the connection: shut down to close it early
    std::string peer;          ///< its address, for the per-peer limit
    bool closedEarly = false;  ///< closed for the limits (its outcome is not reported)
  };
  void read(std::uint64_t id, int fd);
  void closeOldestLocked(const std::string* peer);
  void joinFinishedLocked(std::vector<std::thread>* out);

  const std::string m_token;
  const bool m_sameUser;
  const std::shared_ptr<CaptureStore> m_store;
  const std::function<void()> m_onOutcome;
  const HelloLimits m_limits;
  mutable std::mutex m_mutex;
  std::condition_variable m_ready;
  std::list<Waiting> m_waiting;  ///< oldest first
  std::map<std::uint64_t, std::thread> m_threads;
  std::vector<std::thread> m_finished;
  std::deque<Outcome> m_outcomes;
  std::uint64_t m_nextId = 0;
};

} // namespace hookscope
