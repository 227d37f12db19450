#include "models/PathElideDelegate.h"

#include <QFontMetrics>

QString PathElideDelegate::elidePath(const QString& path, const QFontMetrics& metrics, int width) {
  if (metrics.horizontalAdvance(path) <= width) return path;
  const QString ellipsis = QStringLiteral("…");
  const QStringList parts = path.split(QLatin1Char('.'));
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
