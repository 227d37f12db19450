#pragma once

#include <QStyledItemDelegate>

/// Draws the gradient-norm column as a small bar (log scale across layers) with the number.
class GradNormDelegate : public QStyledItemDelegate {
  Q_OBJECT

public:
  using QStyledItemDelegate::QStyledItemDelegate;
  void paint(QPainter* painter, const QStyleOptionViewItem& option, const QModelIndex& index) const override;
};
