#include "window/SpikeFinder.h"

#include "models/ModuleTreeModel.h"
#include "panels/ModuleTreePanel.h"
#include "panels/PlotsPanel.h"
#include "store/RunCompare.h"
#include "session/SessionHost.h"

#include <QMainWindow>
#include <QStatusBar>
#include <QStringList>

#include <cmath>
#include <map>
#include <utility>

using namespace hookscope;

SpikeFinder::SpikeFinder(const WindowParts& parts) : QObject(parts.frame), m_parts(parts) {
  m_timer.setInterval(500);
  connect(&m_timer, &QTimer::timeout, this, &SpikeFinder::check);
  m_timer.start();
  // A passing message (Opened…, Attached…, Stopped…) takes the bar for its seconds; then what
  // the spike finder found is back, in a reopened export and after the script ended alike.
  connect(parts.frame->statusBar(), &QStatusBar::messageChanged, this, [this](const QString& text) {
    if (text.isEmpty() && !m_summary.isEmpty()) m_parts.frame->statusBar()->showMessage(m_summary);
  });
  // Another run shown (the tree shows its modules): they are the deviation view's rows, and
  // nothing of the last spike stays.
  connect(parts.tree, &QAbstractItemModel::modelReset, this, [this] {
    m_parts.plots->setModuleOrder(m_parts.tree->paths());
    // Looked at again for the tree now shown: a reopened export's store may have been looked
    // at while the tree still held the last model's modules (no Left band column then).
    m_version = 0;
    m_explained = -1;
    m_sinceUnfollowed.invalidate();
    check();
  });
}

void SpikeFinder::reset() {
  m_explained = -1;
  m_sinceUnfollowed.invalidate();
  m_version = 0;
  m_result = FirstMovers();
  const QString said = std::exchange(m_summary, QString());  // cleared first: the bar emptied must not bring it back
  if (!said.isEmpty() && m_parts.frame->statusBar()->currentMessage() == said) m_parts.frame->statusBar()->clearMessage();
  m_parts.treePanel->showBandStarts({});
}

void SpikeFinder::check() {
  const auto store = m_parts.sessions->view().opened().store;
  if (store.get() != m_store) {
    m_store = store.get();
    reset();
  }
  if (!store || store->version() == m_version) return;
  // The loss's largest excursion above its band so far, as explain takes it.
  const BandSettings settings = store->bandSettings();
  const auto spike = largestRise(store->scalars("loss", 0), /*stored=*/true, settings);
  if (!spike) return;
  const bool spiked = spike->score >= settings.sigma;
  if (spiked && spike->step == m_explained) {
    m_version = store->version();
    return;
  }
  // With no spike, the layers that left their band all the same: every series' whole history
  // scored again, so not more often than every few seconds while steps come.
  if (!spiked && m_sinceUnfollowed.isValid() && m_sinceUnfollowed.elapsed() < kUnfollowedEveryMs) return;
  m_version = store->version();
  m_explained = spiked ? spike->step : -1;
  m_result = firstMovers(*store, m_parts.tree->paths(), std::nullopt, settings);  // as explain: from the loss's rise
  if (!spiked) m_sinceUnfollowed.start();
  // Short enough for a 1024 px window's status bar; the tooltip holds explain's lines whole.
  const QString at = tr("Loss left its band at step %1 (+%2σ)").arg(spike->step).arg(spike->score, 0, 'f', 1);
  const auto text = [](const BandMover& m) {
    return tr("step %1: %2 (%3σ)").arg(*m.start).arg(QString::fromStdString(describeSeries(m.key))).arg(
        std::fabs(m.score), 0, 'f', 1);
  };
  if (!spiked) {
    m_summary = m_result.unfollowed.empty()
                    ? QString()
                    : tr("No loss spike, but a layer left its band at %1 and the loss did not follow; F9 goes there")
                          .arg(text(m_result.unfollowed.front()));
  } else if (m_result.movers.empty() && store->seriesKeys().empty()) {
    // Nothing was hooked, so no layer could be named: say so, not "no layer was out of its band".
    m_summary = tr("%1; no layer is hooked, so none can be named: tick Act or Grad in the tree").arg(at);
  } else if (m_result.movers.empty()) {
    m_summary = tr("%1; no layer left its own band there").arg(at);
  } else {
    m_summary = tr("%1: first to move, %2; F9 goes there").arg(at, text(m_result.movers.front()));
  }
  if (!m_summary.isEmpty()) m_parts.frame->statusBar()->showMessage(m_summary);
  QStringList lines;
  for (const auto& line : describeMovers(m_result, 10)) lines << QString::fromStdString(line);
  m_parts.frame->statusBar()->setToolTip(m_summary.isEmpty() ? QString() : lines.join(QLatin1Char('\n')));
  // Each module's earliest start, for the tree, in the ranking's order (a parent row names the
  // first mover inside it).
  std::vector<std::pair<std::string, std::int64_t>> starts;
  std::map<std::string, std::size_t> listed;
  for (const auto* list : {&m_result.movers, &m_result.unfollowed}) {
    for (const BandMover& m : *list) {
      const auto [it, added] = listed.emplace(ownerModule(m.key), starts.size());
      if (added) starts.emplace_back(it->first, *m.start);
      else starts[it->second].second = std::min(starts[it->second].second, *m.start);
    }
  }
  m_parts.treePanel->showBandStarts(starts);
}

const BandMover* SpikeFinder::firstMover() const {
  if (!m_result.movers.empty()) return &m_result.movers.front();
  return m_result.unfollowed.empty() ? nullptr : &m_result.unfollowed.front();
}

void SpikeFinder::showFirstMover() {
  m_sinceUnfollowed.invalidate();  // asked for: looked at now
  check();
  const BandMover* first = firstMover();
  if (!first) {
    m_parts.frame->statusBar()->showMessage(
        m_summary.isEmpty() ? tr("The loss has not left its band and no layer left its own: no first mover to go to")
                            : m_summary,
        8000);
    return;
  }
  m_parts.commands->jumpTo(*first->start, QString::fromStdString(ownerModule(first->key)));
  m_parts.plots->showKind(first->key.kind);
}
