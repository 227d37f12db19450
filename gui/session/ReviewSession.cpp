#include "session/ReviewSession.h"

#include <QFileInfo>

#include <algorithm>
#include <map>

using namespace hookscope;

namespace {

// Without the model, the tree is rebuilt from the dotted paths of the modules it names.
class TreeOfPaths {
public:
  TreeOfPaths(SessionSummary* summary, const std::string& rootName) : m_summary(summary), m_rootName(rootName) {
    add("");
  }

  /// The module of `path`, made with its ancestors when new.
  int add(const std::string& path) {
    auto found = m_index.find(path);
    if (found != m_index.end()) return found->second;
    ModuleInfo info;
    info.path = path;
    int parent = -1;
    if (!path.empty()) {
      const auto dot = path.rfind('.');
      parent = add(dot == std::string::npos ? std::string() : path.substr(0, dot));
      info.name = dot == std::string::npos ? path : path.substr(dot + 1);
      info.depth = m_summary->modules[std::size_t(parent)].depth + 1;
    } else {
      info.name = m_rootName;
    }
    info.parent = parent;
    const int at = int(m_summary->modules.size());
    m_summary->modules.push_back(info);
    m_summary->hooks.push_back(0);
    if (parent >= 0) m_summary->modules[std::size_t(parent)].children.push_back(at);
    m_index[path] = at;
    return at;
  }

private:
  SessionSummary* m_summary;
  std::string m_rootName;
  std::map<std::string, int> m_index;
};

// An export that kept the whole model: every module with its type, parameters and output shapes,
// as the live tree showed them. The root is named by its class, as live; a checkpoint's (it has
// none: "checkpoint") keeps its file's name.
void treeFromManifest(SessionSummary& summary, TreeOfPaths& tree, const std::vector<ModuleRecord>& modules,
                      bool checkpoint) {
  for (const auto& record : modules) {
    auto& info = summary.modules[std::size_t(tree.add(record.path))];
    info.typeName = record.type;
    info.ownParams = record.ownParams;
    info.totalParams = record.totalParams;
    if (record.path.empty() && !record.type.empty() && !checkpoint) info.name = record.type;
    if (record.shapes.empty() || record.shapes.front().empty()) continue;
    ModuleCallShape shape{record.path, 0, {}};
    const QStringList parts = QString::fromStdString(record.shapes.front()).split(QStringLiteral(", "));
    for (const QString& part : parts) shape.shapes.push_back(part.toStdString());
    summary.shapes.push_back(std::move(shape));
  }
}

// An export read at every k-th step (it would not fit under the memory cap whole): said in the
// opening message, briefly, and in the run panel's note where it has one (a recording's), with
// what all of it would take and how to see every step.
void noteStepsLeftOut(SessionSummary& summary, const CaptureStore& store, std::size_t capBytes) {
  const auto thinned = store.thinning();
  if (thinned.empty() || thinned.front().stepsAfter >= thinned.front().stepsBefore) return;
  const ThinningEvent& read = thinned.front();
  const QString brief = QStringLiteral("1 step in %1 shown, under the %2 MiB memory cap")
                            .arg(store.stride())
                            .arg(qulonglong(capBytes >> 20));
  summary.note = summary.note.isEmpty() ? brief : summary.note + QStringLiteral("; ") + brief;
  if (summary.recordedNote.isEmpty()) return;  // the panel shows a run's configuration instead
  summary.recordedNote += QStringLiteral("<br><b>%1 of its %2 steps are shown</b>: all of them would take about %3 MiB, "
                                         "over the memory cap. Raise the cap and open the export again to see every "
                                         "step; the export itself is whole.")
                              .arg(read.stepsAfter)
                              .arg(read.stepsBefore)
                              .arg(qulonglong(read.bytesBefore >> 20));
}

} // namespace

std::unique_ptr<ReviewSession> ReviewSession::open(const QString& dir, const QString& checkpoint, QString* error,
                                                   std::size_t capBytes) {
  ExportData data;
  std::string problem;
  if (!readExport(dir.toStdString(), &data, &problem, capBytes)) {
    *error = QString::fromStdString(problem);
    return nullptr;
  }
  SessionSummary summary;
  summary.path = checkpoint.isEmpty() ? dir : checkpoint;
  summary.fileName = checkpoint.isEmpty() ? QString::fromStdString(data.manifest.modelFile) + QStringLiteral(" (capture)")
                                          : QFileInfo(checkpoint).fileName() + QStringLiteral(" (checkpoint, read-only)");
  summary.reviewOnly = true;
  summary.store = data.store;
  TreeOfPaths tree(&summary, data.manifest.modelFile);
  treeFromManifest(summary, tree, data.manifest.modules, !checkpoint.isEmpty());
  if (data.manifest.modules.empty() && checkpoint.isEmpty()) {
    summary.note = QStringLiteral("an export written before HookScope kept the model: the tree holds the modules "
                                  "its captures name, without types, parameters or shapes");
  }
  for (const auto& hooked : data.manifest.hooked) {
    const int at = tree.add(hooked.module);
    std::uint8_t mask = 0;
    for (const auto& kind : hooked.kinds) {
      if (auto k = parseCaptureKind(kind)) mask |= kindBit(*k);
    }
    summary.hooks[std::size_t(at)] = mask;
  }
  for (const auto& record : data.manifest.interventions) tree.add(record.module);
  summary.alerts = data.alerts;
  summary.interventions = data.manifest.interventions;
  summary.worldSize = std::max<int>(int(data.manifest.ranks.size()), int(data.store->ranks().size()));
  if (!checkpoint.isEmpty()) {
    summary.recordedNote = QStringLiteral("<b>A checkpoint</b>: its tensors as saved. Nothing was run, so nothing here applies.");
  } else if (data.manifest.script) {
    summary.recordedNote = QStringLiteral("<b>Recorded from %1</b>: its own data, loss and optimizer were used; the "
                                          "script's configuration is not in the export.")
                               .arg(QString::fromStdString(data.manifest.script->name).toHtmlEscaped());
  } else {
    summary.recordedConfig = data.manifest.config;
    summary.recordedSteps = data.manifest.steps;
  }
  noteStepsLeftOut(summary, *data.store, capBytes);
  return std::unique_ptr<ReviewSession>(new ReviewSession(std::move(summary), std::move(data), !checkpoint.isEmpty()));
}

ReviewSession::ReviewSession(SessionSummary summary, ExportData data, bool checkpoint)
    : Session(std::move(summary)), m_manifest(std::move(data.manifest)), m_alerts(std::move(data.alerts)),
      m_checkpoint(checkpoint) {}

QString ReviewSession::exportTo(const QString& dir, bool overwrite, const QString& interrupted) {
  // An export reopened: written again as it was.
  ExportManifest manifest = m_manifest;
  manifest.thinning = m_summary.store->thinning();
  manifest.memoryCapBytes = m_summary.store->capBytes();
  manifest.hookscopeVersion = HOOKSCOPE_VERSION;
  manifest.interrupted = interrupted.toStdString();
  ExportOptions options;
  options.overwrite = overwrite;
  options.extraFiles = {{"alerts.csv", alertsCsv(m_alerts)}};
  std::string error;
  writeExport(dir.toStdString(), manifest, *m_summary.store, {}, options, &error);
  return QString::fromStdString(error);
}
