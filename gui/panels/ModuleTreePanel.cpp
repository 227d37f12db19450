#include "panels/ModuleTreePanel.h"

#include "models/GradNormDelegate.h"
#include "models/ModuleTreeModel.h"

#include "kernels/TensorStats.h"

#include <QActionGroup>
#include <QHBoxLayout>
#include <QEvent>
#include <QHeaderView>
#include <QInputDialog>
#include <QLineEdit>
#include <QMenu>
#include <QSettings>
#include <QScrollBar>
#include <QSortFilterProxyModel>
#include <QToolButton>
#include <QTreeView>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <map>

using namespace hookscope;

namespace {

/// The tree's filter: a row matches by any column's text (name, type, shape) or by its module's
/// dotted path, so "h.7.attn" and "transformer.h.7.attn" find the layer the status bar, the
/// alerts and the CLI name that way; a match's ancestors stay, showing it in context.
class ModuleFilter : public QSortFilterProxyModel {
public:
  using QSortFilterProxyModel::QSortFilterProxyModel;

protected:
  bool filterAcceptsRow(int row, const QModelIndex& parent) const override {
    if (QSortFilterProxyModel::filterAcceptsRow(row, parent)) return true;
    const QString path = sourceModel()->index(row, 0, parent).data(ModuleTreeModel::PathRole).toString();
    return !path.isEmpty() && path.contains(filterRegularExpression());
  }
};

constexpr int kNameWidth = 112;  // the least the name column gets by default: "layer3.0.conv2" at depth 1
} // namespace

ModuleTreePanel::ModuleTreePanel(ModuleTreeModel* tree, QWidget* parent) : QWidget(parent), m_tree(tree) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  auto* filterRow = new QHBoxLayout();
  m_filterEdit = new QLineEdit(this);
  m_filterEdit->setPlaceholderText(tr("Filter by name, path or type"));
  m_filterEdit->setClearButtonEnabled(true);
  auto* hookType = new QToolButton(this);
  hookType->setText(tr("Hook all of type…"));
  connect(hookType, &QToolButton::clicked, this, &ModuleTreePanel::hookAllOfType);
  filterRow->addWidget(m_filterEdit, 1);
  filterRow->addWidget(hookType);
  m_filter = new ModuleFilter(this);
  m_filter->setSourceModel(m_tree);
  m_filter->setRecursiveFilteringEnabled(true);
  m_filter->setFilterCaseSensitivity(Qt::CaseInsensitive);
  m_filter->setFilterKeyColumn(-1);
  m_filter->setSortRole(ModuleTreeModel::SortRole);
  connect(m_filterEdit, &QLineEdit::textChanged, this, [this](const QString& text) {
    m_filter->setFilterFixedString(text);
    m_view->expandAll();
  });
  m_view = new QTreeView(this);
  m_view->setModel(m_filter);
  m_view->setUniformRowHeights(true);
  m_view->setIndentation(14);  // deep trees keep room for their names
  m_view->setAlternatingRowColors(true);
  m_view->setItemDelegateForColumn(ModuleTreeModel::GradNorm, new GradNormDelegate(m_view));
  QHeaderView* header = m_view->header();
  header->setStretchLastSection(false);
  // Widths from the font, so that every column shows beside the plots on a 1024 px screen;
  // a longer name is cut in the middle (its last part stays) and is whole in its tooltip.
  m_view->setTextElideMode(Qt::ElideMiddle);
  const QFontMetrics metrics(header->font());
  const auto fit = [&](int column, int atLeast) {
    const QString label = m_tree->headerData(column, Qt::Horizontal, Qt::DisplayRole).toString();
    m_view->setColumnWidth(column, std::max(atLeast, metrics.horizontalAdvance(label) + 12));
  };
  // The name takes what the other columns leave (it is what tells layers apart), never less
  // than its names need: where the others leave less (a narrow pane, a deep model, a step
  // column shown), the tree scrolls sideways rather than cut the names.
  header->setMinimumSectionSize(24);
  header->setSectionResizeMode(ModuleTreeModel::Name, QHeaderView::Interactive);
  m_view->viewport()->installEventFilter(this);
  connect(header, &QHeaderView::sectionResized, this, [this](int column) {
    if (column != ModuleTreeModel::Name) fitNameColumn();
  });
  for (int c : {ModuleTreeModel::Act, ModuleTreeModel::Grad, ModuleTreeModel::In}) fit(c, 28);
  fit(ModuleTreeModel::GradNorm, 56);
  fit(ModuleTreeModel::Params, 44);
  fit(ModuleTreeModel::Type, metrics.horizontalAdvance(QStringLiteral("BatchNorm2d")) + 10);
  fit(ModuleTreeModel::OutputShape, metrics.horizontalAdvance(QStringLiteral("8x16x14x14")) + 8);
  // The tick boxes and the gradient norm next to the name, so they show at any width; type,
  // shape and parameter count after them.
  int visual = 1;
  for (int c : {ModuleTreeModel::Act, ModuleTreeModel::Grad, ModuleTreeModel::In, ModuleTreeModel::GradNorm,
                ModuleTreeModel::Precision, ModuleTreeModel::Params}) {
    header->moveSection(header->visualIndex(c), visual++);
  }
  m_view->setColumnHidden(ModuleTreeModel::Precision, true);  // until a count is chosen for it
  m_view->setColumnHidden(ModuleTreeModel::Differs, true);    // until a run is compared
  m_view->setColumnHidden(ModuleTreeModel::BandLeft, true);   // until the loss leaves its band
  m_view->setContextMenuPolicy(Qt::CustomContextMenu);
  connect(m_view, &QWidget::customContextMenuRequested, this, &ModuleTreePanel::showMenu);
  connect(m_view->selectionModel(), &QItemSelectionModel::currentChanged, this, [this] {
    const int module = currentModule();
    if (module >= 0) Q_EMIT currentModuleChanged(module);
  });
  connect(m_tree, &ModuleTreeModel::hooksChanged, this, [this] {
    Q_EMIT hooksChanged(m_tree->allHooks());  // one message per rank, whatever a tick changed
    const int selected = currentModule();
    if (selected >= 0) Q_EMIT currentHooksChanged(m_tree->hooks(selected));
  });
  layout->addLayout(filterRow);
  layout->addWidget(m_view, 1);
}

void ModuleTreePanel::showModel(const SessionSummary& summary) {
  m_reviewOnly = summary.reviewOnly;
  m_interventions.clear();  // a loaded (or reloaded) model starts without interventions
  // A comparison, or a spike, was of the run shown before: hidden before the new modules come,
  // whose reset the spike finder answers with this run's Left band column (a reopened export
  // with a spike lost it, hidden here after it was shown).
  if (!m_view->isColumnHidden(ModuleTreeModel::Differs) || !m_view->isColumnHidden(ModuleTreeModel::BandLeft)) {
    hideStepColumns();
  }
  m_tree->setModules(summary.modules, summary.hooks, summary.reviewOnly);
  if (!summary.shapes.empty()) showShapes(summary.shapes);  // a reopened run's, as live
  // The views follow the new model's selection, not the last one's (a reset says nothing).
  if (currentModule() >= 0) Q_EMIT currentModuleChanged(currentModule());
  // The Type column as wide as this model's longest type (a transformer's would otherwise read
  // "Trans…coder"), from BatchNorm2d's width up to TransformerEncoder's, as far as the name
  // keeps its kNameWidth: the name tells layers apart. Longer ones are cut in the middle, whole
  // in their tooltip.
  const QFontMetrics metrics(m_view->font());
  const int least = metrics.horizontalAdvance(QStringLiteral("BatchNorm2d")) + 12;
  int wanted = least;
  for (const auto& module : summary.modules) {
    wanted = std::max(wanted, metrics.horizontalAdvance(QString::fromStdString(module.typeName)) + 12);
  }
  wanted = std::min(wanted, metrics.horizontalAdvance(QStringLiteral("TransformerEncoder")) + 12);
  int others = 0;
  for (int c = 0; c < ModuleTreeModel::ColumnCount; ++c) {
    if (c != ModuleTreeModel::Name && c != ModuleTreeModel::Type) others += m_view->header()->sectionSize(c);
  }
  // What the names need: each indented by its depth (below the root), its last part shown.
  int names = 0;
  for (const auto& module : summary.modules) {
    const auto dot = module.path.rfind('.');
    const QString name = QString::fromStdString(module.path.empty() ? module.typeName
                                                : dot == std::string::npos ? module.path : module.path.substr(dot + 1));
    names = std::max(names, (module.depth + 1) * m_view->indentation() + metrics.horizontalAdvance(name) + 8);
  }
  m_nameLeast = names;  // a deep model's names whole (GPT-2's were cut to "c…j"): the tree scrolls sideways
  const int room = m_view->viewport()->width() - others - m_nameLeast;
  m_view->setColumnWidth(ModuleTreeModel::Type, std::clamp(room, least, wanted));
  fitNameColumn();
  markRecordedInterventions(summary.interventions);
  m_view->expandToDepth(1);
  m_view->setCurrentIndex(m_filter->mapFromSource(m_tree->indexOfModule(0)));
}

void ModuleTreePanel::showShapes(const std::vector<ModuleCallShape>& shapes) {
  m_tree->setOutputShapes(shapes);
  // As wide as the widest shape ("32x128x14x14" read "32x1…4x14" in a column fitted to
  // 8x16x14x14), never narrower than it was; the names keep what they need, and the tree scrolls
  // sideways where the pane is narrow.
  const QFontMetrics metrics(m_view->font());
  const int most = metrics.horizontalAdvance(QStringLiteral("1024x1024x1024x1024")) + 12;
  int widest = m_view->columnWidth(ModuleTreeModel::OutputShape);
  for (std::size_t m = 0; m < m_tree->modules().size(); ++m) {
    const QString shape = m_tree->data(m_tree->indexOfModule(int(m), ModuleTreeModel::OutputShape)).toString();
    widest = std::max(widest, std::min(most, metrics.horizontalAdvance(shape) + 12));
  }
  if (widest == m_view->columnWidth(ModuleTreeModel::OutputShape)) return;
  m_view->setColumnWidth(ModuleTreeModel::OutputShape, widest);
  fitNameColumn();
}

void ModuleTreePanel::fitNameColumn() {
  int others = 0;
  for (int c = 0; c < ModuleTreeModel::ColumnCount; ++c) {
    if (c != ModuleTreeModel::Name && !m_view->isColumnHidden(c)) others += m_view->header()->sectionSize(c);
  }
  const int width = std::max(m_nameLeast, m_view->viewport()->width() - others);
  if (m_view->columnWidth(ModuleTreeModel::Name) != width) m_view->setColumnWidth(ModuleTreeModel::Name, width);
}

bool ModuleTreePanel::eventFilter(QObject* watched, QEvent* event) {
  if (watched == m_view->viewport() && event->type() == QEvent::Resize) fitNameColumn();
  return QWidget::eventFilter(watched, event);
}

int ModuleTreePanel::neededWidth() const {
  int columns = kNameWidth;
  for (int c = 0; c < ModuleTreeModel::ColumnCount; ++c) {
    if (c != ModuleTreeModel::Name) columns += m_view->header()->sectionSize(c);
  }
  const int scrollBar = m_view->verticalScrollBar()->sizeHint().width();
  return columns + 2 * m_view->frameWidth() + scrollBar + 8;  // + the panel's margins
}

QMenu* ModuleTreePanel::precisionMenu() {
  auto* menu = new QMenu(tr("&Value column"), this);
  auto* group = new QActionGroup(menu);
  const int chosen = QSettings().value(QStringLiteral("view/precisionColumn"), -1).toInt();
  for (int i = -1; i < int(kPrecisionCounts.size()); ++i) {
    QAction* action = menu->addAction(i < 0 ? tr("&Grad norm") : QString::fromLatin1(kPrecisionCounts[std::size_t(i)].label));
    action->setCheckable(true);
    action->setChecked(i == chosen);
    action->setToolTip(i < 0 ? tr("The L2 norm of each layer's output gradient")
                             : tr("Share of %1").arg(QString::fromLatin1(kPrecisionCounts[std::size_t(i)].meaning)));
    group->addAction(action);
    connect(action, &QAction::triggered, this, [this, i] { setPrecisionColumn(i); });
  }
  setPrecisionColumn(chosen < int(kPrecisionCounts.size()) ? chosen : -1);
  return menu;
}

void ModuleTreePanel::setPrecisionColumn(int count) {
  if (count >= int(kPrecisionCounts.size())) count = -1;
  QSettings().setValue(QStringLiteral("view/precisionColumn"), count);
  m_tree->setPrecision(count, std::vector<double>(m_tree->modules().size(), std::nan("")));
  // In the gradient norm's place: at 1024 px the tree has no room for both beside the plots.
  m_view->setColumnHidden(ModuleTreeModel::GradNorm, count >= 0);
  m_view->setColumnHidden(ModuleTreeModel::Precision, count < 0);
  if (count >= 0) {
    const QFontMetrics metrics(m_view->header()->font());
    const QString label = QString::fromLatin1(kPrecisionCounts[std::size_t(count)].label);
    m_view->setColumnWidth(ModuleTreeModel::Precision, metrics.horizontalAdvance(label) + 12);
  }
  fitNameColumn();
  Q_EMIT precisionColumnChanged(count);
}

std::vector<std::pair<int, std::int64_t>> ModuleTreePanel::stepsByModule(
    const std::vector<std::pair<std::string, std::int64_t>>& firstSteps) const {
  // One lookup a listed module, not a scan of the tree each (a compared run lists every module).
  std::map<std::string, int> byPath;
  for (std::size_t m = 0; m < m_tree->modules().size(); ++m) byPath.emplace(m_tree->modules()[m].path, int(m));
  std::vector<std::pair<int, std::int64_t>> steps;
  for (const auto& [path, step] : firstSteps) {
    const auto found = byPath.find(path);
    if (found != byPath.end()) steps.emplace_back(found->second, step);
  }
  return steps;
}

void ModuleTreePanel::showDifferences(const std::vector<std::pair<std::string, std::int64_t>>& firstSteps) {
  auto steps = stepsByModule(firstSteps);
  std::sort(steps.begin(), steps.end());  // by path they come; a tie is named in the model's order
  m_tree->setFirstDifferences(steps);
  showStepColumn(ModuleTreeModel::Differs, tr("Differs at"));
}

void ModuleTreePanel::showBandStarts(const std::vector<std::pair<std::string, std::int64_t>>& starts) {
  m_tree->setBandStarts(stepsByModule(starts));
  if (starts.empty()) {
    if (!m_view->isColumnHidden(ModuleTreeModel::BandLeft)) hideStepColumns();
    return;
  }
  showStepColumn(ModuleTreeModel::BandLeft, tr("Left band"));
}

void ModuleTreePanel::showStepColumn(int column, const QString& header) {
  m_view->setColumnHidden(ModuleTreeModel::GradNorm, true);
  m_view->setColumnHidden(ModuleTreeModel::Precision, true);
  for (int other : {int(ModuleTreeModel::Differs), int(ModuleTreeModel::BandLeft)}) m_view->setColumnHidden(other, other != column);
  // Sorted by it, earliest first (a click on another header sorts by that column; another run
  // shown brings back the model's order).
  m_view->header()->setSortIndicator(column, Qt::AscendingOrder);
  m_view->setSortingEnabled(true);
  // Its header whole beside the sort indicator.
  m_view->setColumnWidth(column, m_view->header()->fontMetrics().horizontalAdvance(header) + 32);
  if (m_view->header()->visualIndex(column) > m_view->header()->visualIndex(ModuleTreeModel::Params)) {
    m_view->header()->moveSection(m_view->header()->visualIndex(column), m_view->header()->visualIndex(ModuleTreeModel::Params));
  }
  fitNameColumn();
}

void ModuleTreePanel::hideStepColumns() {
  m_view->setColumnHidden(ModuleTreeModel::Differs, true);
  m_view->setColumnHidden(ModuleTreeModel::BandLeft, true);
  m_view->setSortingEnabled(false);
  m_filter->sort(-1);  // the model's own order again
  setPrecisionColumn(m_tree->precisionCount());
}

int ModuleTreePanel::currentModule() const { return m_tree->moduleAt(m_filter->mapToSource(m_view->currentIndex())); }

void ModuleTreePanel::selectModule(const QString& path) {
  const int module = m_tree->moduleOf(path.toStdString());
  if (module < 0) return;
  m_view->setCurrentIndex(m_filter->mapFromSource(m_tree->indexOfModule(module)));
  m_view->scrollTo(m_view->currentIndex());
}

void ModuleTreePanel::showValuesAt(const CaptureStore& store, std::int64_t step, int rank) {
  const auto& modules = m_tree->modules();
  if (modules.empty()) return;
  std::map<std::string, int> byPath;
  for (std::size_t m = 0; m < modules.size(); ++m) byPath[modules[m].path] = int(m);
  std::vector<std::optional<double>> norms(modules.size());
  std::vector<bool> nonFinite(modules.size(), false);
  const int count = m_tree->precisionCount();
  std::vector<double> precision(modules.size(), std::nan(""));
  // A step the store left out under its cap shows the step kept before it, as the plots do.
  const std::int64_t kept = store.stepAtOrBefore(step);
  for (const auto& key : store.seriesKeys()) {
    const auto found = byPath.find(ownerModule(key));
    if (found == byPath.end()) continue;
    SeriesPoint point;
    if (!store.pointAt(key, step, &point) || point.step != kept) continue;
    if (point.stats.hasNonFinite()) nonFinite[std::size_t(found->second)] = true;
    // The tree shows the chosen rank's norm; a NaN on any rank of a job marks the module.
    if (key.kind == CaptureKind::Gradient && key.call == 0 && key.index == 0 && key.rank == rank) {
      norms[std::size_t(found->second)] = point.stats.l2norm;
    }
    // The Precision column: the largest share among the module's own tensors, on that rank.
    const bool ownTensor = key.kind == CaptureKind::Activation || key.kind == CaptureKind::Input ||
                           key.kind == CaptureKind::Gradient;
    if (count >= 0 && ownTensor && key.rank == rank) {
      const double f = precisionFraction(point.stats, kPrecisionCounts[std::size_t(count)]);
      double& shown = precision[std::size_t(found->second)];
      if (!std::isnan(f) && !(shown >= f)) shown = f;
    }
  }
  m_tree->setLiveValues(norms, nonFinite, kept);
  if (count >= 0) m_tree->setPrecision(count, precision);
}

void ModuleTreePanel::setGradientIntervention(int module, GradientIntervention intervention) {
  if (m_reviewOnly) return;
  Q_EMIT gradientInterventionChanged(module, intervention);
  m_interventions[module].first = intervention;
  markInterventions(module);
}

void ModuleTreePanel::setOutputIntervention(int module, OutputIntervention intervention) {
  if (m_reviewOnly || module <= 0) return;
  Q_EMIT outputInterventionChanged(module, intervention);
  m_interventions[module].second = intervention;
  markInterventions(module);
}

void ModuleTreePanel::markInterventions(int module) {
  const auto& [gradient, output] = m_interventions[module];
  m_tree->setIntervention(module, QString::fromStdString(gradient.describe()), QString::fromStdString(output.describe()));
}

void ModuleTreePanel::markRecordedInterventions(const std::vector<InterventionRecord>& records) {
  std::map<int, std::pair<QStringList, QStringList>> marks;  // module -> gradient, output
  for (const auto& r : records) {
    const int module = m_tree->moduleOf(r.module);
    if (module < 0) continue;
    const QString text = QStringLiteral("%1 (steps %2–%3)").arg(QString::fromStdString(r.action)).arg(r.fromStep).arg(r.toStep);
    (r.target == "output" ? marks[module].second : marks[module].first) << text;
  }
  for (const auto& [module, texts] : marks) {
    m_tree->setIntervention(module, texts.first.join(QStringLiteral("; ")), texts.second.join(QStringLiteral("; ")));
  }
}

void ModuleTreePanel::hookAllOfType() {
  const QStringList types = m_tree->typeNames();
  if (types.isEmpty()) return;
  bool ok = false;
  const QString type = QInputDialog::getItem(this, tr("Hook all of type"), tr("Hook activations and gradients of every"),
                                             types, 0, false, &ok);
  if (!ok) return;
  m_tree->setHookForType(type, CaptureKind::Activation, true);
  m_tree->setHookForType(type, CaptureKind::Gradient, true);
}

void ModuleTreePanel::showMenu(const QPoint& at) {
  const int module = m_tree->moduleAt(m_filter->mapToSource(m_view->indexAt(at)));
  if (module < 0 || m_reviewOnly) return;
  QMenu menu(this);
  menu.addSection(tr("Gradient through this output"));
  menu.addAction(tr("Clamp to [-v, v]…"), this, [this, module] {
    bool ok = false;
    const double v = QInputDialog::getDouble(this, tr("Clamp gradient"),
                                             tr("Clamp each element of the gradient through this output to [-v, v].\nv ="),
                                             1.0, 1e-12, 1e12, 6, &ok);
    if (ok) setGradientIntervention(module, {GradientIntervention::Clamp, v});
  });
  menu.addAction(tr("Scale by…"), this, [this, module] {
    bool ok = false;
    const double f = QInputDialog::getDouble(this, tr("Scale gradient"),
                                             tr("Multiply the gradient through this output by\nfactor ="), 0.5, -1e12, 1e12, 6, &ok);
    if (ok) setGradientIntervention(module, {GradientIntervention::Scale, f});
  });
  menu.addAction(tr("Zero it"), this, [this, module] { setGradientIntervention(module, {GradientIntervention::Zero, 0}); });
  menu.addAction(tr("Leave it"), this, [this, module] { setGradientIntervention(module, {}); })
      ->setEnabled(m_interventions[module].first.kind != GradientIntervention::None);
  if (module > 0) {
    menu.addSection(tr("Output of this module"));
    menu.addAction(tr("Zero it (ablate)"), this, [this, module] { setOutputIntervention(module, {OutputIntervention::Zero}); });
    menu.addAction(tr("Replace with its mean"), this, [this, module] { setOutputIntervention(module, {OutputIntervention::Mean}); });
    menu.addAction(tr("Leave it"), this, [this, module] { setOutputIntervention(module, {}); })
        ->setEnabled(m_interventions[module].second.kind != OutputIntervention::None);
  }
  menu.exec(m_view->viewport()->mapToGlobal(at));
}
