#pragma once

#include <QStyledItemDelegate>

/// Draws a dotted module path that does not fit its column cut between its parts, keeping the
/// last part whole ("layer3.0.downsample.0" → "layer3.…downsample.0"), so that two layers that
/// differ only at the end stay apart. The whole path is the cell's tooltip.
class PathElideDelegate : public QStyledItemDelegate {
  Q_OBJECT

public:
  using QStyledItemDelegate::QStyledItemDelegate;
  /// `path` cut to `width` pixels of `metrics`: its first part, "…", and as many of its last
  /// parts as fit (the last one always, cut at its start when even it does not fit).
  static QString elidePath(const QString& path, const QFontMetrics& metrics, int width);

protected:
  void initStyleOption(QStyleOptionViewItem* option, const QModelIndex& index) const override;
};
