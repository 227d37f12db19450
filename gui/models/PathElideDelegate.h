#pragma once

#include <QStyledItemDelegate>

/// Draws a dotted module path that does not fit its column shortened between its parts, keeping
/// the layer's own name whole: the names before it cut to a letter ("blocks.2.mlp.fc1" →
/// "b.2.m.fc1", every index kept), else cut out ("layer3.…downsample.0"), so that two layers
/// that differ only at the end, or only in a block's index, stay apart. The whole path is the
/// cell's tooltip.
class PathElideDelegate : public QStyledItemDelegate {
  Q_OBJECT

public:
  using QStyledItemDelegate::QStyledItemDelegate;
  /// `path` cut to `width` pixels of `metrics`: the names before the layer's own abbreviated to a
  /// letter, from the left, as far as needed; else its first part, "…", and as many of its last
  /// parts as fit (the last one always, cut at its start when even it does not fit).
  static QString elidePath(const QString& path, const QFontMetrics& metrics, int width);

protected:
  void initStyleOption(QStyleOptionViewItem* option, const QModelIndex& index) const override;
};
