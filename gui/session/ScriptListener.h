#pragma once
// Waiting for a training script at an address (or every rank of its torch.distributed job): the
// first to attach starts a job, the other ranks of that job join it, and when every rank that
// came has left, the job is over. One script (or job) per listener: then it closes.

#include "state/SessionTypes.h"

#include <QObject>
#include <QString>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace hookscope {
class AttachJob;
class AttachListener;
struct ScriptRecord;
} // namespace hookscope

class ScriptListener : public QObject {
  Q_OBJECT

public:
  /// The first script's job, made on the listener's thread before its rank is served: whoever
  /// opens it as the session (SessionHost, blocking on its own thread) gets it here.
  using OnFirst = std::function<void(std::shared_ptr<hookscope::AttachJob> job,
                                     std::shared_ptr<hookscope::CaptureStore> store, const hookscope::ScriptRecord& script,
                                     const std::vector<hookscope::ModuleInfo>& modules,
                                     const std::vector<std::uint8_t>& hooks)>;

  ScriptListener();
  ~ScriptListener() override;  ///< stops waiting, and waits for its thread

  /// Opens the listener at `address` ("" for HookScope's default) and waits on a thread of its
  /// own; false with why (`error`) when it cannot listen there.
  bool start(const QString& address, std::size_t capBytes, quint32 breakRules, OnFirst onFirst, QString* error);
  /// Stops waiting; a script attached stays, unless `endJob` (the window closes): then the job
  /// it gathered ends too (its scripts detach and train on).
  void stop(bool endJob = false);
  /// The full address scripts attach to (token included).
  QString address() const;
  /// Whether it still waits for a script (or the ranks of its job).
  bool waiting() const { return m_open.load(); }

Q_SIGNALS:
  /// A connection was refused (not a HookScope script, wrong token): why.
  void refused(const QString& message);
  void rankAttached(int rank, const QString& who);
  /// Every rank of the job that attached has left (or the script did): why, as the window says it.
  void jobOver(const QString& reason);

private:
  /// The thread: waits for a script and the other ranks of its job, then for their end.
  void loop();
  /// Why the job ended, its ranks named together when they ended alike.
  static QString endedReason(const hookscope::AttachJob& job, int worldSize, const std::string& name);

  std::mutex m_listenerMutex;  ///< guards m_listener's end against stop() from another thread
  std::unique_ptr<hookscope::AttachListener> m_listener;
  std::thread m_thread;
  std::atomic<bool> m_stop{false};
  std::atomic<bool> m_endJob{false};
  std::atomic<bool> m_open{false};
  std::shared_ptr<hookscope::AttachJob> m_job;  ///< the job being gathered (its own thread)
  std::size_t m_capBytes = 0;
  quint32 m_breakRules = 0;
  OnFirst m_onFirst;
  QString m_address;
};
