#include "models/GradNormDelegate.h"

#include "models/ModuleTreeModel.h"

#include <QPainter>

void GradNormDelegate::paint(QPainter* painter, const QStyleOptionViewItem& option, const QModelIndex& index) const {
  const double fraction = index.data(ModuleTreeModel::GradNormFractionRole).toDouble();
  if (fraction > 0) {
    QRect bar = option.rect.adjusted(2, 3, -2, -3);
    bar.setWidth(int(bar.width() * fraction));
    const bool bad = index.data(ModuleTreeModel::NonFiniteRole).toBool();
    painter->fillRect(bar, bad ? QColor(220, 60, 60, 90) : QColor(60, 130, 220, 70));
  }
  QStyledItemDelegate::paint(painter, option, index);
}
