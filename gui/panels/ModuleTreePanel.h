#pragma once

#include "state/SessionTypes.h"

#include <QWidget>

#include <map>
#include <utility>

class ModuleTreeModel;
class QLineEdit;
class QMenu;
class QSortFilterProxyModel;
class QTreeView;

/// The module tree with its hook tick boxes, the filter above it, "Hook all of type…", and the
/// tree's context menu of interventions (clamp, scale or zero a gradient; ablate an output).
/// What the user changes goes out as signals: every module's hooks at once, each intervention.
class ModuleTreePanel : public QWidget {
  Q_OBJECT

public:
  explicit ModuleTreePanel(ModuleTreeModel* tree, QWidget* parent = nullptr);
  QTreeView* view() const { return m_view; }
  /// The width at which every column shows without scrolling.
  int neededWidth() const;

  /// Shows a newly opened model's tree (or an export's, read-only, with its interventions).
  void showModel(const SessionSummary& summary);
  /// The module selected (an index into the model's modules), or -1.
  int currentModule() const;
  /// Selects the layer with this dotted path and scrolls to it.
  void selectModule(const QString& path);
  /// The gradient norm and NaN/Inf marks of every module at `step` of `rank`.
  void showValuesAt(const hookscope::CaptureStore& store, std::int64_t step, int rank);
  void setGradientIntervention(int module, hookscope::GradientIntervention intervention);
  /// Not for the root, whose output is the model's.
  void setOutputIntervention(int module, hookscope::OutputIntervention intervention);
  /// View > Value column: the gradient norm, or one of the low-precision counts in its place;
  /// the choice is kept in the settings and applied at once.
  QMenu* precisionMenu();
  /// Shows `count` (an index into hookscope::kPrecisionCounts) in the gradient norm's place;
  /// -1: the gradient norm.
  void setPrecisionColumn(int count);
  /// Shows each module's output shape at the first step, the Shape column widened to the widest
  /// (up to four 4-digit dimensions; a wider one is cut in the middle, whole in its tooltip).
  void showShapes(const std::vector<hookscope::ModuleCallShape>& shapes);
  /// Shows, in the gradient norm's place, the first step each module differs from a compared
  /// run (`firstSteps`: module path and step, for the modules that differ).
  void showDifferences(const std::vector<std::pair<std::string, std::int64_t>>& firstSteps);
  /// Shows, in the gradient norm's place, the step each module left its band at the loss's
  /// spike (issue 49), first movers first (a parent names the first inside it); empty: hides
  /// the column again.
  void showBandStarts(const std::vector<std::pair<std::string, std::int64_t>>& starts);

private:
  /// `firstSteps` by module index, in their order (a path the tree does not hold left out).
  std::vector<std::pair<int, std::int64_t>> stepsByModule(const std::vector<std::pair<std::string, std::int64_t>>& firstSteps) const;
  /// A step column (Differs, BandLeft) in the gradient norm's place, sorted by it.
  void showStepColumn(int column, const QString& header);
  /// The model's own order and columns again, no step column.
  void hideStepColumns();
  /// The name column: what the other columns leave, never less than m_nameLeast.
  void fitNameColumn();
  bool eventFilter(QObject* watched, QEvent* event) override;

Q_SIGNALS:
  /// Another module is selected.
  void currentModuleChanged(int module);
  /// The selected module's hooks changed (kindBit bits).
  void currentHooksChanged(quint8 mask);
  /// Ticks changed: every module's mask (one tick on a parent changes its whole subtree).
  void hooksChanged(const std::vector<std::uint8_t>& masks);
  /// The user set (or cleared) an intervention on a module.
  void gradientInterventionChanged(int module, hookscope::GradientIntervention intervention);
  void outputInterventionChanged(int module, hookscope::OutputIntervention intervention);
  /// Another count for the Precision column: its numbers come with the next showValuesAt.
  void precisionColumnChanged(int count);

private:
  void hookAllOfType();
  void showMenu(const QPoint& at);
  void markInterventions(int module);
  /// Marks a reopened export's interventions, with the steps each was in force.
  void markRecordedInterventions(const std::vector<hookscope::InterventionRecord>& records);

  ModuleTreeModel* m_tree;
  QSortFilterProxyModel* m_filter;
  QLineEdit* m_filterEdit;
  QTreeView* m_view;
  bool m_reviewOnly = false;
  int m_nameLeast = 112;  ///< the least the name column gets: what its names need, each at its depth
  std::map<int, std::pair<hookscope::GradientIntervention, hookscope::OutputIntervention>> m_interventions;
};
