#include "window/RunComparer.h"

#include "files/ExportFolder.h"
#include "models/ModuleTreeModel.h"
#include "panels/ModuleTreePanel.h"
#include "panels/PlotsPanel.h"
#include "session/SessionHost.h"

#include <QApplication>
#include <QFileDialog>
#include <QFileInfo>
#include <QInputDialog>
#include <QMainWindow>
#include <QSettings>
#include <QStatusBar>
#include <QStringList>
#include <QThread>

using namespace hookscope;

RunComparer::RunComparer(const WindowParts& parts)
    : QObject(parts.frame), m_parts(parts), m_tolerance(QSettings().value(QStringLiteral("compare/tolerance"), 1e-4).toDouble()) {
  if (!(m_tolerance > 0)) m_tolerance = 1e-4;
}

RunComparer::~RunComparer() {
  if (!m_reading) return;
  disconnect(m_reading, nullptr, this, nullptr);
  QApplication::restoreOverrideCursor();
  m_reading->wait();  // the read holds nothing of the window's: it ends on its own
  delete m_reading;
}

void RunComparer::setTolerance(double tolerance) {
  if (!(tolerance > 0)) return;
  m_tolerance = tolerance;
  QSettings().setValue(QStringLiteral("compare/tolerance"), tolerance);
  if (m_otherStore && !m_reading) compareAgain();
}

void RunComparer::chooseTolerance() {
  bool ok = false;
  const double tolerance = QInputDialog::getDouble(
      m_parts.frame, tr("Comparison tolerance"),
      tr("Relative difference of a series' mean, std or L2 norm that counts as a divergence:"), m_tolerance, 1e-12, 1e6,
      12, &ok);
  if (ok) setTolerance(tolerance);
}

void RunComparer::chooseAndCompare() {
  // Beside the run shown (an export's folder, or the model's): where its sibling runs are.
  const QString shownPath = m_parts.sessions->view().opened().path;
  const QString start = shownPath.isEmpty() ? QString() : QFileInfo(shownPath).absolutePath();
  const QString dir = QFileDialog::getExistingDirectory(m_parts.frame, tr("Compare with run (an export folder)"), start);
  if (!dir.isEmpty()) compareWith(dir);
}

bool RunComparer::compareWith(const QString& dir) {
  const auto shown = m_parts.sessions->view().opened().store;
  if (!shown || shown->seriesKeys().empty()) {
    m_parts.commands->showMessage(tr("Compare with run"), tr("Nothing is captured yet: run or open a run first, then compare it "
                                                     "with an export."));
    return false;
  }
  if (m_reading) {
    m_parts.frame->statusBar()->showMessage(tr("Still reading a run to compare with: choose again once it is compared"), 8000);
    return false;
  }
  struct Read {
    ExportData data;
    std::string problem;
    bool ok = false;
  };
  auto read = std::make_shared<Read>();
  const std::size_t cap = m_parts.sessions->memoryCap();
  m_reading = QThread::create([read, path = dir.toStdString(), cap] {
    read->ok = readExport(path, &read->data, &read->problem, cap);
  });
  connect(m_reading, &QThread::finished, this, [this, read, dir, cap] {
    m_reading->deleteLater();
    m_reading = nullptr;
    QApplication::restoreOverrideCursor();
    if (!read->ok) {
      m_parts.frame->statusBar()->clearMessage();
      m_parts.commands->showMessage(tr("Compare with run"), QString::fromStdString(read->problem));
      Q_EMIT compared(false);
      return;
    }
    m_otherStore = read->data.store;
    m_other = QFileInfo(dir).fileName();
    const std::string thinned = thinnedReadText(m_other.toStdString(), *m_otherStore, cap);
    m_otherThinned = thinned.empty() ? QString()
                                     : QString::fromStdString(thinned) + tr("; the steps both runs hold are compared");
    Q_EMIT compared(compareAgain());
  });
  QApplication::setOverrideCursor(Qt::BusyCursor);
  m_parts.frame->statusBar()->showMessage(tr("Reading %1 to compare with the run shown…").arg(QFileInfo(dir).fileName()));
  m_reading->start();
  return true;
}

bool RunComparer::compareAgain() {
  const auto shown = m_parts.sessions->view().opened().store;
  if (!shown || shown->seriesKeys().empty() || !m_otherStore) {
    m_parts.commands->showMessage(tr("Compare with run"), tr("No run with captures is shown to compare with %1: open or "
                                                     "run one, then compare again.").arg(m_other));
    return false;
  }
  // The shown run's model order: forward order for the first divergence.
  m_result = compareRuns(*shown, *m_otherStore, m_tolerance, m_parts.tree->paths());
  if (m_result.diverged()) {
    const auto& first = m_result.first;
    m_summary = tr("Differs from %1 first at step %2: %3 (%4 %5 vs %6); F8 goes there")
                    .arg(m_other)
                    .arg(first.step)
                    .arg(QString::fromStdString(describeSeries(first.key)), QString::fromStdString(first.statistic))
                    .arg(first.a, 0, 'g', 6)
                    .arg(first.b, 0, 'g', 6);
  } else {
    m_summary = tr("No divergence from %1 over %2 steps and %3 series (tolerance %4)")
                    .arg(m_other)
                    .arg(m_result.stepsCompared)
                    .arg(m_result.seriesCompared)
                    .arg(m_tolerance);
  }
  // What else the status bar says, the most telling first (it is cut at the window's width; the
  // tooltip has it all): a run read in part (which explains steps kept by one run only), the
  // series only one run holds, the first note.
  QStringList besides;
  if (!m_otherThinned.isEmpty()) besides << tr("1 step in %1 of it read").arg(m_otherStore->stride());
  if (!m_result.onlyInA.empty() || !m_result.onlyInB.empty()) {
    besides << tr("%1 series only here, %2 only there").arg(m_result.onlyInA.size()).arg(m_result.onlyInB.size());
  }
  if (!m_result.notes.empty() && m_otherThinned.isEmpty()) besides << QString::fromStdString(m_result.notes.front());
  if (!besides.isEmpty()) m_summary += QStringLiteral(" (%1)").arg(besides.join(QStringLiteral("; ")));
  m_parts.treePanel->showDifferences(m_result.moduleFirstStep);
  m_parts.plots->setComparedStore(m_otherStore);
  m_parts.frame->statusBar()->showMessage(m_summary);
  // The whole of it on hover: every alignment note and the unshared series.
  QStringList details{m_summary};
  if (!m_otherThinned.isEmpty()) details << tr("Note: %1").arg(m_otherThinned);
  for (const auto& note : m_result.notes) details << tr("Note: %1").arg(QString::fromStdString(note));
  const auto list = [&](const QString& label, const std::vector<std::string>& names) {
    if (names.empty()) return;
    QStringList shown;
    for (std::size_t i = 0; i < names.size() && i < 12; ++i) shown << QString::fromStdString(names[i]);
    if (names.size() > 12) shown << tr("… and %1 more").arg(names.size() - 12);
    details << label + shown.join(QStringLiteral(", "));
  };
  list(tr("Only in the shown run: "), m_result.onlyInA);
  list(tr("Only in %1: ").arg(m_other), m_result.onlyInB);
  m_parts.frame->statusBar()->setToolTip(details.join(QLatin1Char('\n')));
  return true;
}

void RunComparer::showFirstDivergence() {
  if (!m_result.diverged()) {
    m_parts.frame->statusBar()->showMessage(m_summary.isEmpty() ? tr("Compare with a run first: File > Compare with run…")
                                                           : m_summary,
                                       8000);
    return;
  }
  const auto& key = m_result.first.key;
  m_parts.commands->jumpTo(m_result.first.step, QString::fromStdString(ownerModule(key)));
  m_parts.plots->showKind(key.kind);
}
