#include "models/PathElideDelegate.h"

#include <QFontMetrics>

namespace {

bool isIndex(const QString& part) {
  bool number = false;
  part.toInt(&number);
  return number;
}

/// `parts` with the names before the layer's own (its last name and the indices after it) cut to
/// their first letter, one more from the left each time, until it fits: "blocks.2.mlp.fc1" →
/// "b.2.mlp.fc1" → "b.2.m.fc1". Every level stays, so blocks 0 and 2 stay apart. "" if none fits.
QString abbreviated(QStringList parts, const QFontMetrics& metrics, int width) {
  int own = int(parts.size()) - 1;
  while (own > 0 && isIndex(parts[own])) --own;
  for (int i = 0; i < own; ++i) {
    if (isIndex(parts[i]) || parts[i].size() < 2) continue;
    parts[i] = parts[i].left(1);
    const QString shorter = parts.join(QLatin1Char('.'));
    if (metrics.horizontalAdvance(shorter) <= width) return shorter;
  }
  return QString();
}

} // namespace

QString PathElideDelegate::elidePath(const QString& path, const QFontMetrics& metrics, int width) {
  if (metrics.horizontalAdvance(path) <= width) return path;
  const QString ellipsis = QStringLiteral("…");
  const QStringList parts = path.split(QLatin1Char('.'));
  if (const QString shorter = abbreviated(parts, metrics, width); !shorter.isEmpty()) return shorter;
  // The most whole parts from the end that fit after `lead`.
  const auto longestTail = [&](const QString& lead) {
    QString tail = parts.back();
    for (int i = int(parts.size()) - 2; i > 0; --i) {
      const QString longer = parts[i] + QLatin1Char('.') + tail;
      if (metrics.horizontalAdvance(lead + longer) > width) break;
      tail = longer;
    }
    return tail;
  };
  // The first part and two or more of the last ("features.…downsample.0"), else as many of
  // the last as fit ("…downsample.0"), else the end of the last part.
  const QString head = parts.front() + QLatin1Char('.') + ellipsis;
  const QString withHead = longestTail(head);
  if (parts.size() > 2 && withHead.contains(QLatin1Char('.')) && metrics.horizontalAdvance(head + withHead) <= width) {
    return head + withHead;
  }
  const QString alone = longestTail(ellipsis);
  if (metrics.horizontalAdvance(ellipsis + alone) <= width) return ellipsis + alone;
  return metrics.elidedText(parts.back(), Qt::ElideLeft, width);
}

void PathElideDelegate::initStyleOption(QStyleOptionViewItem* option, const QModelIndex& index) const {
  QStyledItemDelegate::initStyleOption(option, index);
  const int room = option->rect.width() - 8;  // the cell's margins
  // The rank suffix a job's alerts carry (" · rank 3") stays whole after the path.
  const int rank = option->text.indexOf(QStringLiteral(" · "));
  const QString path = rank < 0 ? option->text : option->text.left(rank);
  const QString suffix = rank < 0 ? QString() : option->text.mid(rank);
  option->text = elidePath(path, option->fontMetrics, room - option->fontMetrics.horizontalAdvance(suffix)) + suffix;
  option->textElideMode = Qt::ElideNone;
}
