#pragma once
// What a user reads off an axis as last drawn: its tick labels inside the range.

#include "plots/QCustomPlotInclude.h"

#include <QFontMetrics>
#include <QStringList>

#include <algorithm>

/// Why `axis` is not readable (fewer than two tick labels inside its range, or two of them
/// running into each other), or an empty string when it is.
inline QString unreadableAxis(QCPAxis* axis) {
  const QVector<double> ticks = axis->tickVector();
  const QVector<QString> labels = axis->tickVectorLabels();
  const QFontMetrics metrics(axis->tickLabelFont());
  const bool horizontal = axis->orientation() == Qt::Horizontal;
  QVector<QPair<double, double>> spans;  // each label's extent along the axis, in pixels
  for (int t = 0; t < ticks.size() && t < labels.size(); ++t) {
    if (!axis->range().contains(ticks[t]) || labels[t].isEmpty()) continue;
    const double at = axis->coordToPixel(ticks[t]);
    const double half = (horizontal ? metrics.horizontalAdvance(labels[t]) : metrics.height()) / 2.0;
    spans.append({at - half, at + half});
  }
  std::sort(spans.begin(), spans.end());
  const QString shown = QStringList(labels.begin(), labels.end()).join(QLatin1Char(' '));
  const QString what = QStringLiteral("axis '%1' (%2 px, labels %3)")
                           .arg(axis->label())
                           .arg(horizontal ? axis->axisRect()->width() : axis->axisRect()->height())
                           .arg(shown);
  if (spans.size() < 2) return what + QStringLiteral(": %1 tick label(s) inside the range").arg(spans.size());
  for (int t = 1; t < spans.size(); ++t) {
    if (spans[t].first <= spans[t - 1].second) return what + QStringLiteral(": two labels overlap");
  }
  return QString();
}
