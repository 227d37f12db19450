#pragma once
// What is open, as one immutable value (issue 48): its kind, what it is, where its run is, the
// newest step whose captures are all in, an attached job's ranks, and what it can be asked to do
// now. SessionHost makes a new one after every change and hands it to the window's thread; the
// window's parts read it there and keep no copy of their own, so nothing shown can outlive what
// it says.

#include "state/RunState.h"
#include "state/SessionTypes.h"

#include <QMap>
#include <QMetaType>
#include <QSet>
#include <QString>

#include <memory>

/// The kinds of open thing. Each session kind says which it is (Session::kind()).
enum class SessionKind {
  Nothing,     ///< nothing opened yet
  ModelFile,   ///< a model file run by an engine process
  Script,      ///< one attached training script
  Job,         ///< every rank of an attached torch.distributed job
  Export,      ///< a reopened export folder, read-only
  Checkpoint,  ///< a checkpoint's weights, captured once, read-only
};

/// What the open session can be asked to do now (each session kind says, Session::abilities):
/// the menus enable these, the commands check them.
struct SessionAbilities {
  bool run = false;     ///< Run (or Resume, while paused)
  bool pause = false;
  bool step = false;    ///< run exactly one step
  bool stop = false;    ///< Stop, or Detach for a script; also gives up opening a model
  bool reset = false;   ///< open the same model file again, fresh weights
  bool exportCaptures = false;
  bool open = false;    ///< open another model file or capture in its place
  bool attach = false;  ///< wait for a training script in its place

  /// Nothing open: something can be opened or attached, nothing else.
  static SessionAbilities nothingOpen() {
    SessionAbilities can;
    can.open = can.attach = true;
    return can;
  }
};

/// A training script or every rank of its job: its own loop runs the steps.
constexpr bool isAttachedKind(SessionKind kind) { return kind == SessionKind::Script || kind == SessionKind::Job; }

struct SessionView {
  SessionKind kind = SessionKind::Nothing;
  /// Never null: an empty summary while nothing is open.
  std::shared_ptr<const SessionSummary> summary = std::make_shared<const SessionSummary>();
  RunState state;
  /// The newest step whose captures are all in (a job: that every live rank ended; -1: none).
  qint64 settledStep = -1;
  SessionAbilities can = SessionAbilities::nothingOpen();
  /// An attached job's ranks that joined, and why each that left did.
  QSet<int> ranksAttached;
  QMap<int, QString> ranksEnded;
  /// Why the attached script or job left ("train.py: closed by the script after 40 steps"; ""
  /// while it is attached, and for every other kind).
  QString scriptEnded;

  const SessionSummary& opened() const { return *summary; }
  /// A training script or every rank of its job: its own loop runs the steps.
  bool attached() const { return isAttachedKind(kind); }
  /// An export or a checkpoint: nothing runs.
  bool readOnly() const { return kind == SessionKind::Export || kind == SessionKind::Checkpoint; }
  /// A model file that runs in the window's engine process.
  bool modelFile() const { return kind == SessionKind::ModelFile; }
};

Q_DECLARE_METATYPE(SessionView)
