#pragma once

#include "common/CaptureKind.h"
#include "common/ModelTypes.h"

#include <QAbstractItemModel>
#include <QString>

#include <optional>
#include <vector>

/// The module tree with hook checkboxes. One top-level row: the root module. Checking a
/// parent checks its whole subtree; a parent shows partly checked when only some are.
class ModuleTreeModel : public QAbstractItemModel {
  Q_OBJECT

public:
  enum Column { Name, Type, OutputShape, Params, Act, Grad, In, GradNorm, Precision, Differs, BandLeft, ColumnCount };
  enum Role {
    ModuleIndexRole = Qt::UserRole + 1, PathRole, GradNormFractionRole, NonFiniteRole,
    SortRole  ///< what sorting by a column compares: "Differs at" as numbers, a module that does not differ last
  };

  explicit ModuleTreeModel(QObject* parent = nullptr);

  /// Replaces the tree. `hooks` holds each module's mask (may be empty: nothing hooked).
  void setModules(std::vector<hookscope::ModuleInfo> modules, std::vector<std::uint8_t> hooks,
                  bool reviewOnly);
  void clear();
  const std::vector<hookscope::ModuleInfo>& modules() const { return m_modules; }
  /// The modules' paths in the model's order: the order a step makes its captures in.
  std::vector<std::string> paths() const;
  std::uint8_t hooks(int module) const;
  /// Every module's mask, in module order.
  const std::vector<std::uint8_t>& allHooks() const { return m_hooks; }

  /// Sets one kind on a module and its whole subtree.
  void setHookRecursive(int module, hookscope::CaptureKind kind, bool on);
  /// Sets one kind on every module of a type ("hook all Conv2d").
  void setHookForType(const QString& typeName, hookscope::CaptureKind kind, bool on);
  /// Distinct type names, the most common first; the root's class last.
  QStringList typeNames() const;

  /// Marks a module's interventions in the Name column ("grad clamp 0.01", "output zero";
  /// "" for none).
  void setIntervention(int module, const QString& gradient, const QString& output);
  QString intervention(int module) const;
  /// Each module's output shape at its first call, as "8x16x14x14" ("8x16 …" when it returns
  /// more than one tensor, "—" when none).
  void setOutputShapes(const std::vector<hookscope::ModuleCallShape>& calls);
  /// Each module's output-gradient norm at `step`, the shown one or the one kept before it (none:
  /// not captured there; NaN: its gradient held no finite value) and whether its tensors held NaN/Inf.
  void setLiveValues(const std::vector<std::optional<double>>& gradNorms, const std::vector<bool>& nonFinite,
                     std::int64_t step);
  /// The Precision column: which low-precision count it shows (an index into
  /// hookscope::kPrecisionCounts, -1: none) and each module's fraction of it (NaN: none).
  void setPrecision(int count, const std::vector<double>& fractions);
  int precisionCount() const { return m_precisionCount; }
  /// A step column's steps: (module index, step) of the modules that have one, the one to name
  /// first first (a parent names, of the descendants at its earliest step, the first listed).
  using ModuleSteps = std::vector<std::pair<int, std::int64_t>>;
  /// The Differs column: the first step where a series of each module differs from the
  /// compared run.
  void setFirstDifferences(const ModuleSteps& steps);
  /// The BandLeft column: the step each module's excursion out of its band began, at the loss's
  /// spike the window explains (issue 49).
  void setBandStarts(const ModuleSteps& steps);

  QModelIndex indexOfModule(int module, int column = Name) const;
  int moduleAt(const QModelIndex& index) const;
  /// The module with this dotted path, or -1.
  int moduleOf(const std::string& path) const;

  QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
  QModelIndex parent(const QModelIndex& child) const override;
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  /// 11181642 as "11.2M", 9000 as "9000": what a narrow column can show.
  static QString compactCount(std::int64_t n);
  /// 0.00037 as "3.7e-4", 0.0123 as "0.0123", 0 as "0".
  static QString compactNumber(double v);
  bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

Q_SIGNALS:
  /// Hook masks changed for these modules; the engine should apply them.
  void hooksChanged(const QVector<QPair<int, quint8>>& changes);

private:
  static hookscope::CaptureKind kindOfColumn(int column);
  /// What hovering a module's cell in `column` says.
  QVariant toolTip(int m, int column) const;
  Qt::CheckState checkState(int module, hookscope::CaptureKind kind) const;
  void applyHook(int module, hookscope::CaptureKind kind, bool on, QVector<QPair<int, quint8>>& changes);
  void notifyChanged(const QVector<QPair<int, quint8>>& changes);
  void emitColumnChanged(int first, int last);

  std::vector<hookscope::ModuleInfo> m_modules;
  std::vector<std::uint8_t> m_hooks;
  std::vector<int> m_row;  ///< row of each module under its parent
  std::vector<QString> m_shapes;
  std::vector<QString> m_interventions;
  std::vector<std::optional<double>> m_gradNorms;
  std::vector<double> m_gradFractions;
  std::vector<bool> m_nonFinite;
  std::int64_t m_valuesStep = -1;  ///< the step m_gradNorms and m_nonFinite are of
  std::vector<double> m_precision;
  int m_precisionCount = -1;
  /// A step column (Differs, BandLeft): each module's own step (-1: none), and the first of
  /// itself and its descendants (the earliest step, of those the one listed first): a collapsed
  /// parent says that something inside it moved, and sorts by it.
  struct StepColumn {
    std::vector<std::int64_t> own;
    std::vector<std::int64_t> first;  ///< -1: none in the subtree
    std::vector<int> rank;            ///< the first's place in the list
    std::vector<int> where;           ///< the first's module
    void assign(const std::vector<hookscope::ModuleInfo>& modules, const ModuleSteps& steps);
  };
  StepColumn m_differs;   ///< setFirstDifferences
  StepColumn m_bandLeft;  ///< setBandStarts
  const StepColumn& stepsOf(int column) const { return column == BandLeft ? m_bandLeft : m_differs; }
  /// A step column's cell: its own step, or "(S)" for a descendant's; its tooltip names which.
  QVariant stepCell(int m, int column, int role) const;
  bool m_reviewOnly = false;
};
