#include "session/ScriptListener.h"

#include "session/AttachedJobSession.h"
#include "links/AttachJob.h"
#include "links/HelloGate.h"
#include "wire/AttachListener.h"

#include <algorithm>
#include <map>

using namespace hookscope;

namespace {

/// "0-3, 5, 7" for ranks 0, 1, 2, 3, 5, 7 (ascending).
std::string rankList(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(ranks[i]);
    if (j > i) out += (j == i + 1 ? ", " : "-") + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

} // namespace

ScriptListener::ScriptListener() = default;

ScriptListener::~ScriptListener() {
  stop();
  if (m_thread.joinable()) m_thread.join();
}

bool ScriptListener::start(const QString& address, std::size_t capBytes, quint32 breakRules, OnFirst onFirst,
                           QString* error) {
  std::string problem;
  m_listener = AttachListener::open(address.isEmpty() ? defaultAttachAddress() : address.toStdString(), &problem);
  if (!m_listener) {
    *error = QString::fromStdString(problem);
    return false;
  }
  m_address = QString::fromStdString(m_listener->address());
  m_capBytes = capBytes;
  m_breakRules = breakRules;
  m_onFirst = std::move(onFirst);
  m_open = true;
  m_thread = std::thread([this] { loop(); });
  return true;
}

void ScriptListener::stop(bool endJob) {
  if (endJob) m_endJob = true;
  m_stop = true;
  std::lock_guard<std::mutex> lock(m_listenerMutex);
  if (m_listener) m_listener->wake();
}

QString ScriptListener::address() const { return m_address; }

void ScriptListener::loop() {
  std::shared_ptr<AttachJob> job;
  // One script (or job) per Attach: every rank shares one store.
  const auto store = std::make_shared<CaptureStore>(m_capBytes);
  int worldSize = 1;
  std::string name;
  {
    // Each connection's hello is read on a thread of its own (a slow or idle peer delays no
    // one); an outcome wakes the accept.
    const auto& address = m_listener->parsed();
    AttachListener* listener = m_listener.get();
    HelloGate gate(address.tcp ? address.token : "", !address.tcp, store, [listener] { listener->wake(); });
    while (!m_stop.load()) {
      // Ranks of the job join until all have, or until every one that came has left.
      if (job && (int(job->ranks().size()) >= worldSize || job->waitEnded(0))) break;
      const int fd = m_listener->accept(job ? 200 : -1);
      if (fd >= 0) gate.add(fd);
      while (auto outcome = gate.next(0)) {
        if (!outcome->link) {
          Q_EMIT refused(QString::fromStdString(outcome->refusal));
          continue;
        }
        auto accepted = std::move(outcome->link);
        std::string error;
        const ScriptRecord script = accepted->script();
        if (!job) {
          job = std::make_shared<AttachJob>(store);
          worldSize = std::max(1, script.worldSize);
          name = script.name;
          job->setAllHooks(accepted->hooks());  // what the script hooked itself, for every rank
          job->setBreakRules(m_breakRules);
          m_onFirst(job, store, script, accepted->modules(), accepted->hooks());
        }
        if (!job->add(std::move(accepted), &error)) {
          Q_EMIT refused(QString::fromStdString(error));
          continue;
        }
        if (worldSize > 1) Q_EMIT rankAttached(script.rank, AttachedJobSession::describe(script));
        if (int(job->ranks().size()) >= worldSize) break;
      }
    }
  }  // the gate closes the connections still waiting, before the listener goes
  // One script (or job) per Attach: no more connections; a late one is told no one listens.
  // Waiting stopped with no script (a file opened instead, the dialog cancelled) closes the
  // address too: it stayed bound, and a script started then waited for a welcome that never
  // came ("did not accept this script (timed out)") and trained unhooked.
  m_open = false;
  {
    std::unique_ptr<AttachListener> closing;
    std::lock_guard<std::mutex> lock(m_listenerMutex);
    closing = std::move(m_listener);
  }
  if (!job) return;
  if (m_endJob) job->close();
  job->waitEnded(-1);
  Q_EMIT jobOver(endedReason(*job, worldSize, name));
}

QString ScriptListener::endedReason(const AttachJob& job, int worldSize, const std::string& name) {
  const auto scripts = job.scripts();
  if (worldSize <= 1) return QString::fromStdString(name + ": " + scripts.front().ended);
  QString reason = QStringLiteral("every attached rank of job %1 left (%2 of %3 ranks attached)")
                       .arg(QString::fromStdString(scripts.front().job))
                       .arg(scripts.size())
                       .arg(worldSize);
  // Ranks that ended alike are named together: "ranks 0-7: closed by the script after 400 steps".
  std::map<std::string, std::vector<int>> byEnd;
  for (const auto& s : scripts) byEnd[s.ended].push_back(s.rank);
  for (const auto& [ended, ranks] : byEnd) {
    reason += QStringLiteral("; %1 %2: %3")
                  .arg(ranks.size() > 1 ? QStringLiteral("ranks") : QStringLiteral("rank"),
                       QString::fromStdString(rankList(ranks)), QString::fromStdString(ended));
  }
  return reason;
}
