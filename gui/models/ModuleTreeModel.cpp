#include "models/ModuleTreeModel.h"

#include "kernels/TensorStats.h"

#include <QBrush>
#include <QColor>
#include <QLocale>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

using hookscope::CaptureKind;
using hookscope::kindBit;

ModuleTreeModel::ModuleTreeModel(QObject* parent) : QAbstractItemModel(parent) {}

void ModuleTreeModel::setModules(std::vector<hookscope::ModuleInfo> modules,
                                 std::vector<std::uint8_t> hooks, bool reviewOnly) {
  beginResetModel();
  m_modules = std::move(modules);
  m_hooks = std::move(hooks);
  m_hooks.resize(m_modules.size(), 0);
  m_row.assign(m_modules.size(), 0);
  for (const auto& info : m_modules) {
    for (std::size_t r = 0; r < info.children.size(); ++r) m_row[std::size_t(info.children[r])] = int(r);
  }
  m_shapes.assign(m_modules.size(), QString());
  m_interventions.assign(m_modules.size(), QString());
  m_gradNorms.assign(m_modules.size(), std::nullopt);
  m_gradFractions.assign(m_modules.size(), 0.0);
  m_nonFinite.assign(m_modules.size(), false);
  m_valuesStep = -1;
  m_precision.assign(m_modules.size(), std::nan(""));
  m_differs.assign(m_modules, {});
  m_bandLeft.assign(m_modules, {});
  m_reviewOnly = reviewOnly;
  endResetModel();
}

void ModuleTreeModel::clear() { setModules({}, {}, false); }

std::uint8_t ModuleTreeModel::hooks(int module) const {
  return module >= 0 && std::size_t(module) < m_hooks.size() ? m_hooks[std::size_t(module)] : 0;
}

CaptureKind ModuleTreeModel::kindOfColumn(int column) {
  switch (column) {
    case Grad: return CaptureKind::Gradient;
    case In: return CaptureKind::Input;
    default: return CaptureKind::Activation;
  }
}

Qt::CheckState ModuleTreeModel::checkState(int module, CaptureKind kind) const {
  bool any = false, all = true;
  std::vector<int> stack{module};
  while (!stack.empty()) {
    const int m = stack.back();
    stack.pop_back();
    const bool on = m_hooks[std::size_t(m)] & kindBit(kind);
    any = any || on;
    all = all && on;
    for (int c : m_modules[std::size_t(m)].children) stack.push_back(c);
  }
  return all ? Qt::Checked : any ? Qt::PartiallyChecked : Qt::Unchecked;
}

void ModuleTreeModel::applyHook(int module, CaptureKind kind, bool on,
                                QVector<QPair<int, quint8>>& changes) {
  auto& mask = m_hooks[std::size_t(module)];
  const std::uint8_t next = on ? (mask | kindBit(kind)) : (mask & ~kindBit(kind));
  if (next != mask) {
    mask = next;
    changes.append({module, next});
  }
}

void ModuleTreeModel::notifyChanged(const QVector<QPair<int, quint8>>& changes) {
  if (changes.isEmpty()) return;
  // Ancestors' partial states change too; the tree is small enough to refresh whole columns.
  std::set<int> touched;
  for (const auto& change : changes) {
    for (int m = change.first; m >= 0; m = m_modules[std::size_t(m)].parent) {
      if (!touched.insert(m).second) break;
    }
  }
  for (int m : touched) Q_EMIT dataChanged(indexOfModule(m, Act), indexOfModule(m, In), {Qt::CheckStateRole});
  Q_EMIT hooksChanged(changes);
}

void ModuleTreeModel::setHookRecursive(int module, CaptureKind kind, bool on) {
  if (module < 0 || std::size_t(module) >= m_modules.size()) return;
  QVector<QPair<int, quint8>> changes;
  std::vector<int> stack{module};
  while (!stack.empty()) {
    const int m = stack.back();
    stack.pop_back();
    applyHook(m, kind, on, changes);
    for (int c : m_modules[std::size_t(m)].children) stack.push_back(c);
  }
  notifyChanged(changes);
}

void ModuleTreeModel::setHookForType(const QString& typeName, CaptureKind kind, bool on) {
  QVector<QPair<int, quint8>> changes;
  for (std::size_t m = 0; m < m_modules.size(); ++m) {
    if (QString::fromStdString(m_modules[m].typeName) == typeName) applyHook(int(m), kind, on, changes);
  }
  notifyChanged(changes);
}

QStringList ModuleTreeModel::typeNames() const {
  // The most common layer types first (Conv2d, ReLU, Linear, ...); the root's class, which is
  // the model itself, last.
  std::map<QString, int> counts;
  for (std::size_t m = 1; m < m_modules.size(); ++m) {
    const auto name = QString::fromStdString(m_modules[m].typeName);
    if (!name.isEmpty()) ++counts[name];
  }
  QStringList names;
  for (const auto& entry : counts) names.append(entry.first);
  std::stable_sort(names.begin(), names.end(), [&](const QString& a, const QString& b) { return counts[a] > counts[b]; });
  if (!m_modules.empty()) {
    const auto root = QString::fromStdString(m_modules.front().typeName);
    if (!root.isEmpty() && !names.contains(root)) names.append(root);
  }
  return names;
}

void ModuleTreeModel::setIntervention(int module, const QString& gradient, const QString& output) {
  if (module < 0 || std::size_t(module) >= m_modules.size()) return;
  QStringList parts;
  if (!gradient.isEmpty()) parts << QStringLiteral("grad ") + gradient;
  if (!output.isEmpty()) parts << QStringLiteral("output ") + output;
  m_interventions[std::size_t(module)] = parts.join(QStringLiteral(", "));
  Q_EMIT dataChanged(indexOfModule(module, Name), indexOfModule(module, Name));
}

QString ModuleTreeModel::intervention(int module) const {
  return module >= 0 && std::size_t(module) < m_interventions.size() ? m_interventions[std::size_t(module)] : QString();
}

void ModuleTreeModel::setOutputShapes(const std::vector<hookscope::ModuleCallShape>& calls) {
  std::map<std::string, QString> shapes;
  for (const auto& call : calls) {
    if (call.call != 0) continue;
    // A 0-d tensor's shape has no dimensions to write: "scalar", not an empty cell.
    const QString first = call.shapes.empty() ? QStringLiteral("—")
                          : call.shapes.front().empty() ? tr("scalar")
                                                        : QString::fromStdString(call.shapes.front());
    shapes[call.module] = first + (call.shapes.size() > 1 ? QStringLiteral(" …") : QString());
  }
  for (std::size_t m = 0; m < m_modules.size(); ++m) {
    const auto shape = shapes.find(m_modules[m].path);
    if (shape != shapes.end()) m_shapes[m] = shape->second;
  }
  emitColumnChanged(OutputShape, OutputShape);
}

void ModuleTreeModel::emitColumnChanged(int first, int last) {
  for (std::size_t m = 0; m < m_modules.size(); ++m) {
    Q_EMIT dataChanged(indexOfModule(int(m), first), indexOfModule(int(m), last));
  }
}

void ModuleTreeModel::setLiveValues(const std::vector<std::optional<double>>& gradNorms, const std::vector<bool>& nonFinite,
                                    std::int64_t step) {
  if (gradNorms.size() != m_modules.size() || nonFinite.size() != m_modules.size()) return;
  if (gradNorms == m_gradNorms && nonFinite == m_nonFinite && step == m_valuesStep) return;
  m_valuesStep = step;
  m_gradNorms = gradNorms;
  m_nonFinite = nonFinite;
  // Bars on a log scale between the smallest and largest norm shown.
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& norm : m_gradNorms) {
    const double n = norm.value_or(0.0);
    if (std::isfinite(n) && n > 0) {
      lo = std::min(lo, std::log10(n));
      hi = std::max(hi, std::log10(n));
    }
  }
  for (std::size_t m = 0; m < m_modules.size(); ++m) {
    const double n = m_gradNorms[m].value_or(0.0);
    m_gradFractions[m] = !(std::isfinite(n) && n > 0) ? 0.0
                         : hi > lo ? 0.1 + 0.9 * (std::log10(n) - lo) / (hi - lo)
                                   : 1.0;
  }
  emitColumnChanged(Name, GradNorm);
}

void ModuleTreeModel::setPrecision(int count, const std::vector<double>& fractions) {
  if (fractions.size() != m_modules.size()) return;
  const bool header = count != m_precisionCount;
  m_precisionCount = count;
  m_precision = fractions;
  if (header) Q_EMIT headerDataChanged(Qt::Horizontal, Precision, Precision);
  emitColumnChanged(Precision, Precision);
}

void ModuleTreeModel::setFirstDifferences(const ModuleSteps& steps) {
  m_differs.assign(m_modules, steps);
  emitColumnChanged(Differs, Differs);
}

void ModuleTreeModel::StepColumn::assign(const std::vector<hookscope::ModuleInfo>& modules, const ModuleSteps& steps) {
  own.assign(modules.size(), -1);
  first.assign(modules.size(), -1);
  rank.assign(modules.size(), -1);
  where.assign(modules.size(), -1);
  for (std::size_t listed = 0; listed < steps.size(); ++listed) {
    const auto [m, at] = steps[listed];
    if (m < 0 || std::size_t(m) >= modules.size() || at < 0 || own[std::size_t(m)] >= 0) continue;
    own[std::size_t(m)] = at;
    for (int up = m; up >= 0; up = modules[std::size_t(up)].parent) {
      if (first[std::size_t(up)] >= 0 && first[std::size_t(up)] <= at) continue;  // a tie: the one listed first
      first[std::size_t(up)] = at;
      rank[std::size_t(up)] = int(listed);
      where[std::size_t(up)] = m;
    }
  }
}

QVariant ModuleTreeModel::stepCell(int m, int column, int role) const {
  const StepColumn& steps = stepsOf(column);
  const std::int64_t mine = steps.own[std::size_t(m)];
  const std::int64_t first = steps.first[std::size_t(m)];
  if (role == SortRole) {
    // Earliest first, a tie in the order listed (explain's ranking; the model's order for a
    // compared run); rows with none last, in the model's order.
    if (first < 0) return qint64(std::numeric_limits<qint32>::max()) * (qint64(1) << 31) + m;
    return qint64(first) * (qint64(1) << 31) + steps.rank[std::size_t(m)];
  }
  if (role == Qt::DisplayRole) {
    if (mine >= 0) return QString::number(mine);
    return first < 0 ? QStringLiteral("—") : QStringLiteral("(%1)").arg(first);
  }
  if (first < 0 || steps.where[std::size_t(m)] == m) return {};  // the tooltip: only for a descendant's step
  const QString who = QString::fromStdString(m_modules[std::size_t(steps.where[std::size_t(m)])].path);
  return column == BandLeft ? tr("%1, inside this module, left its band at step %2").arg(who).arg(first)
                            : tr("%1, inside this module, differs first at step %2").arg(who).arg(first);
}

std::vector<std::string> ModuleTreeModel::paths() const {
  std::vector<std::string> order;
  for (const auto& module : m_modules) order.push_back(module.path);
  return order;
}

void ModuleTreeModel::setBandStarts(const ModuleSteps& steps) {
  m_bandLeft.assign(m_modules, steps);
  emitColumnChanged(BandLeft, BandLeft);
}

QModelIndex ModuleTreeModel::indexOfModule(int module, int column) const {
  if (module < 0 || std::size_t(module) >= m_modules.size()) return {};
  return createIndex(m_row[std::size_t(module)], column, quintptr(module));
}

int ModuleTreeModel::moduleAt(const QModelIndex& index) const {
  return index.isValid() ? int(index.internalId()) : -1;
}

QModelIndex ModuleTreeModel::index(int row, int column, const QModelIndex& parent) const {
  if (row < 0 || column < 0 || column >= ColumnCount) return {};
  if (!parent.isValid()) {
    return row == 0 && !m_modules.empty() ? createIndex(0, column, quintptr(0)) : QModelIndex();
  }
  const auto& children = m_modules[std::size_t(parent.internalId())].children;
  if (std::size_t(row) >= children.size()) return {};
  return createIndex(row, column, quintptr(children[std::size_t(row)]));
}

QModelIndex ModuleTreeModel::parent(const QModelIndex& child) const {
  if (!child.isValid()) return {};
  const int parent = m_modules[std::size_t(child.internalId())].parent;
  return parent < 0 ? QModelIndex() : indexOfModule(parent, 0);
}

int ModuleTreeModel::rowCount(const QModelIndex& parent) const {
  if (!parent.isValid()) return m_modules.empty() ? 0 : 1;
  if (parent.column() != 0) return 0;
  return int(m_modules[std::size_t(parent.internalId())].children.size());
}

QString ModuleTreeModel::compactCount(std::int64_t n) {
  if (n < 10000) return QString::number(n);
  static const char* suffixes[] = {"k", "M", "G", "T"};
  double value = double(n);
  int s = -1;
  while (value >= 999.95 && s < 3) {
    value /= 1000;
    ++s;
  }
  return QString::number(value, 'f', value < 99.95 ? 1 : 0) + QLatin1String(suffixes[s]);
}

QString ModuleTreeModel::compactNumber(double v) {
  if (v == 0) return QStringLiteral("0");
  if (!std::isfinite(v)) return QString::number(v);
  const double a = std::abs(v);
  if (a >= 0.01 && a < 10000) return QString::number(v, 'g', 3);
  // 3.7e-4 rather than 3.70e-04: two digits are what a narrow column can show.
  QString text = QString::number(v, 'e', 1);
  text.replace(QStringLiteral("e-0"), QStringLiteral("e-")).replace(QStringLiteral("e+0"), QStringLiteral("e")).replace(QStringLiteral("e+"), QStringLiteral("e"));
  return text;
}

int ModuleTreeModel::moduleOf(const std::string& path) const {
  for (std::size_t m = 0; m < m_modules.size(); ++m) {
    if (m_modules[m].path == path) return int(m);
  }
  return -1;
}

int ModuleTreeModel::columnCount(const QModelIndex&) const { return ColumnCount; }

QVariant ModuleTreeModel::toolTip(int m, int column) const {
  const auto& info = m_modules[std::size_t(m)];
  if (column == Params && info.totalParams) {
    QString tip = QStringLiteral("%1 parameters").arg(QLocale().toString(qlonglong(info.totalParams)));
    // Tied parameters in this subtree, each counted once.
    QStringList tied;
    std::vector<int> pending{m};
    while (!pending.empty() && tied.size() < 8) {
      const auto& module = m_modules[std::size_t(pending.back())];
      pending.pop_back();
      for (const auto& p : module.params) {
        if (!p.sharedWith.empty()) tied << QStringLiteral("%1 is %2").arg(QString::fromStdString(p.name), QString::fromStdString(p.sharedWith));
      }
      pending.insert(pending.end(), module.children.begin(), module.children.end());
    }
    if (!tied.isEmpty()) tip += QStringLiteral(", tied ones counted once:\n") + tied.join(QLatin1Char('\n'));
    return tip;
  }
  if (column == GradNorm && m_gradNorms[std::size_t(m)]) {
    const double n = *m_gradNorms[std::size_t(m)];
    return std::isnan(n) ? tr("L2 norm of the output gradient at step %1: NaN, no value of it was finite").arg(m_valuesStep)
                         : tr("L2 norm of the output gradient at step %1: %2").arg(m_valuesStep).arg(n, 0, 'g', 8);
  }
  // A type or shape cut to fit its column is whole in its tooltip.
  if (column == Type) {
    return QString::fromStdString(info.qualifiedType.empty() ? info.typeName : info.qualifiedType);
  }
  if (column == OutputShape && !m_shapes[std::size_t(m)].isEmpty()) {
    return tr("Output shape at the first step: %1").arg(m_shapes[std::size_t(m)]);
  }
  if (column == Precision && m_precisionCount >= 0 && !std::isnan(m_precision[std::size_t(m)])) {
    return tr("%1% of its values at step %2: %3").arg(100 * m_precision[std::size_t(m)], 0, 'g', 6).arg(m_valuesStep)
        .arg(QString::fromLatin1(hookscope::kPrecisionCounts[std::size_t(m_precisionCount)].meaning));
  }
  // Elsewhere: the module's path, what is wrong with it or done to it, its own parameters.
  QString tip = info.path.empty() ? QStringLiteral("root module") : QString::fromStdString(info.path);
  if (m_nonFinite[std::size_t(m)]) tip += tr("\nNaN or Inf in its tensors at step %1").arg(m_valuesStep);
  if (!m_interventions[std::size_t(m)].isEmpty()) {
    tip += m_reviewOnly ? QStringLiteral("\nIntervention: %1").arg(m_interventions[std::size_t(m)])
                        : QStringLiteral("\nIntervention: %1 (right-click to change)").arg(m_interventions[std::size_t(m)]);
  }
  for (const auto& p : info.params) {
    QString shape;
    for (auto s : p.shape) shape += (shape.isEmpty() ? "" : "x") + QString::number(s);
    if (!p.sharedWith.empty()) shape += QStringLiteral(" shared with %1").arg(QString::fromStdString(p.sharedWith));
    tip += QStringLiteral("\n%1  %2").arg(QString::fromStdString(p.name), shape.trimmed());
  }
  return tip;
}

QVariant ModuleTreeModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid()) return {};
  const int m = int(index.internalId());
  const auto& info = m_modules[std::size_t(m)];
  const int column = index.column();
  if (role == ModuleIndexRole) return m;
  if (role == PathRole) return QString::fromStdString(info.path);
  if (role == GradNormFractionRole) return m_gradFractions[std::size_t(m)];
  if (role == NonFiniteRole) return bool(m_nonFinite[std::size_t(m)]);
  const bool stepColumn = column == Differs || column == BandLeft;
  if (stepColumn && (role == SortRole || role == Qt::DisplayRole || role == Qt::ToolTipRole)) return stepCell(m, column, role);
  if (role == SortRole) return data(index, Qt::DisplayRole);
  if (role == Qt::CheckStateRole && (column == Act || column == Grad || column == In)) {
    return checkState(m, kindOfColumn(column));
  }
  if (role == Qt::ForegroundRole && column == Name && m_nonFinite[std::size_t(m)]) {
    return QBrush(QColor(200, 30, 30));
  }
  if (role == Qt::ToolTipRole) return toolTip(m, column);
  if (role == Qt::TextAlignmentRole && (column == Params || column == GradNorm || column == Precision || column == Differs ||
                                            column == BandLeft)) {
    return int(Qt::AlignRight | Qt::AlignVCenter);
  }
  if (role != Qt::DisplayRole) return {};
  switch (column) {
    case Name: {
      QString name = QString::fromStdString(info.name);
      if (!m_interventions[std::size_t(m)].isEmpty()) name += QStringLiteral("  ✂ ") + m_interventions[std::size_t(m)];
      return m_nonFinite[std::size_t(m)] ? QStringLiteral("⚠ ") + name : name;
    }
    case Type: return QString::fromStdString(info.typeName);
    case OutputShape: return m_shapes[std::size_t(m)];
    case Params: return info.totalParams ? compactCount(info.totalParams) : QString();
    case GradNorm: {
      const auto& n = m_gradNorms[std::size_t(m)];
      if (!n) return QString();
      return std::isnan(*n) ? QStringLiteral("NaN") : std::isinf(*n) ? QStringLiteral("Inf") : compactNumber(*n);
    }
    case Precision: {
      const double f = m_precision[std::size_t(m)];
      return std::isnan(f) ? QString() : f == 0 ? QStringLiteral("0") : QString::number(100 * f, 'g', 2) + QLatin1Char('%');
    }
    default: return {};
  }
}

bool ModuleTreeModel::setData(const QModelIndex& index, const QVariant& value, int role) {
  if (!index.isValid() || role != Qt::CheckStateRole || m_reviewOnly) return false;
  const int column = index.column();
  if (column != Act && column != Grad && column != In) return false;
  const auto state = static_cast<Qt::CheckState>(value.toInt());
  setHookRecursive(int(index.internalId()), kindOfColumn(column), state != Qt::Unchecked);
  return true;
}

Qt::ItemFlags ModuleTreeModel::flags(const QModelIndex& index) const {
  if (!index.isValid()) return Qt::NoItemFlags;
  const int column = index.column();
  const bool tick = column == Act || column == Grad || column == In;
  // In a review the tick boxes say what was hooked and take no clicks: drawn disabled (greyed),
  // the row still selectable through its other columns.
  if (tick && m_reviewOnly) return Qt::ItemIsSelectable;
  Qt::ItemFlags f = Qt::ItemIsEnabled | Qt::ItemIsSelectable;
  if (tick) f |= Qt::ItemIsUserCheckable;
  return f;
}

QVariant ModuleTreeModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal) return {};
  if (section == Precision && m_precisionCount >= 0) {
    const auto& count = hookscope::kPrecisionCounts[std::size_t(m_precisionCount)];
    if (role == Qt::DisplayRole) return QString::fromLatin1(count.label);
    if (role == Qt::ToolTipRole) {
      return tr("Share of %1, the largest among the module's captured outputs, inputs and output gradients at the "
                "step shown (View > Value column)")
          .arg(QString::fromLatin1(count.meaning));
    }
  }
  static const char* names[] = {"Module", "Type", "Shape", "Params", "Act", "Grad", "In", "Grad norm", "Precision", "Differs at",
                                "Left band"};
  static const char* tips[] = {"Module name (hover for path and parameters)",
                               "Module class",
                               "Output shape: of the first output at the first step",
                               "Parameters in the module and its children",
                               "Capture activations (outputs)",
                               "Capture gradients with respect to the outputs",
                               "Capture inputs",
                               "L2 norm of the gradient at the module's output, latest step",
                               "A low-precision count: choose it in View > Value column",
                               "The first step where a series of the module differs from the compared run (File > "
                               "Compare with run…); — where none does",
                               "Left its band at: where the loss spiked, the step each module's series left their own band (the first "
                               "mover's first; F9 goes to it); — where none did"};
  if (section < 0 || section >= ColumnCount) return {};
  if (role == Qt::DisplayRole) return QString::fromLatin1(names[section]);
  if (role == Qt::ToolTipRole) return QString::fromLatin1(tips[section]);
  return {};
}
