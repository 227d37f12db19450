#pragma once

#include "EngineTypes.h"

#include <QWidget>

#include <map>
#include <utility>

class EngineAdapter;
class ModuleTreeModel;
class QLineEdit;
class QSortFilterProxyModel;
class QTreeView;

/// The module tree with its hook tick boxes, the filter above it, "Hook all of type…", and the
/// tree's context menu of interventions (clamp, scale or zero a gradient; ablate an output).
/// Hooks and interventions go to the engine as they change.
class ModuleTreePanel : public QWidget {
  Q_OBJECT

public:
  ModuleTreePanel(ModuleTreeModel* tree, EngineAdapter* engine, QWidget* parent = nullptr);
  QTreeView* view() const { return m_view; }
  /// The width at which every column shows without scrolling.
  int neededWidth() const;

  /// Shows a newly opened model's tree (or an export's, read-only, with its interventions).
  void showModel(const ModelSummary& summary);
  /// The module selected (an index into the model's modules), or -1.
  int currentModule() const;
  /// Selects the layer with this dotted path and scrolls to it.
  void selectModule(const QString& path);
  /// The gradient norm and NaN/Inf marks of every module at `step` of `rank`.
  void showValuesAt(const hookscope::CaptureStore& store, std::int64_t step, int rank);
  void setGradientIntervention(int module, hookscope::GradientIntervention intervention);
  /// Not for the root, whose output is the model's.
  void setOutputIntervention(int module, hookscope::OutputIntervention intervention);

Q_SIGNALS:
  /// Another module is selected.
  void currentModuleChanged(int module);
  /// The selected module's hooks changed (kindBit bits).
  void currentHooksChanged(quint8 mask);

private:
  void hookAllOfType();
  void showMenu(const QPoint& at);
  void markInterventions(int module);
  /// Marks a reopened export's interventions, with the steps each was in force.
  void markRecordedInterventions(const std::vector<hookscope::InterventionRecord>& records);

  ModuleTreeModel* m_tree;
  EngineAdapter* m_engine;
  QSortFilterProxyModel* m_filter;
  QLineEdit* m_filterEdit;
  QTreeView* m_view;
  bool m_reviewOnly = false;
  std::map<int, std::pair<hookscope::GradientIntervention, hookscope::OutputIntervention>> m_interventions;
};
