#include "plots/LineBundle.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace {

double distanceToSegment(const QPointF& p, const QPointF& a, const QPointF& b) {
  const QPointF ab = b - a;
  const double length2 = QPointF::dotProduct(ab, ab);
  const double t = length2 > 0 ? std::clamp(QPointF::dotProduct(p - a, ab) / length2, 0.0, 1.0) : 0.0;
  const QPointF d = p - (a + t * ab);
  return std::hypot(d.x(), d.y());
}

} // namespace

LineBundle::LineBundle(QCPAxis* keyAxis, QCPAxis* valueAxis) : QCPAbstractPlottable(keyAxis, valueAxis) {
  setSelectable(QCP::stWhole);
}

void LineBundle::reset(int count) {
  m_series.assign(std::size_t(std::max(0, count)), Series());
  m_highlighted = -1;
}

void LineBundle::setColor(int series, const QColor& color) { m_series[std::size_t(series)].color = color.rgba(); }

double LineBundle::axisValue(double value) const {
  if (m_logAxis) return value > 0 && std::isfinite(value) ? std::log10(value) : NAN;
  return value;
}

void LineBundle::Series::widen(double key, double value) {
  keyLow = std::min(keyLow, key);
  keyHigh = std::max(keyHigh, key);
  if (!std::isfinite(value)) return;
  valueLow = std::min(valueLow, value);
  valueHigh = std::max(valueHigh, value);
  if (value <= 0) return;
  positiveLow = std::min(positiveLow, value);
  positiveHigh = std::max(positiveHigh, value);
}

void LineBundle::Series::recomputeRanges() {
  keyLow = valueLow = positiveLow = INFINITY;
  keyHigh = valueHigh = positiveHigh = -INFINITY;
  for (int i = 0; i < keys.size(); ++i) widen(keys[i], values[i]);
}

void LineBundle::append(int series, const QVector<double>& keys, const QVector<double>& values) {
  Series& s = m_series[std::size_t(series)];
  s.keys += keys;
  s.values += values;
  for (int i = 0; i < keys.size(); ++i) {
    s.axisValues.append(axisValue(values[i]));
    s.widen(keys[i], values[i]);
  }
}

void LineBundle::removeLast(int series) {
  Series& s = m_series[std::size_t(series)];
  if (s.keys.isEmpty()) return;
  s.keys.removeLast();
  s.values.removeLast();
  s.axisValues.removeLast();
  s.recomputeRanges();  // rare: after a thinning dropped the newest point
}

void LineBundle::updateAxisValues() {
  const bool log = valueAxis()->scaleType() == QCPAxis::stLogarithmic;
  if (log == m_logAxis) return;
  m_logAxis = log;
  for (Series& s : m_series) {
    for (int i = 0; i < s.values.size(); ++i) s.axisValues[i] = axisValue(s.values[i]);
  }
}

LineBundle::Mapping LineBundle::mapping() const {
  Mapping m{};
  const QCPAxis* k = keyAxis();
  const QCPAxis* v = valueAxis();
  const QCPRange kr = k->range(), vr = v->range();
  const double kp1 = k->coordToPixel(kr.lower), kp2 = k->coordToPixel(kr.upper);
  m.kx = kr.size() > 0 ? (kp2 - kp1) / kr.size() : 0;
  m.kx0 = kp1 - m.kx * kr.lower;
  const double vp1 = v->coordToPixel(vr.lower), vp2 = v->coordToPixel(vr.upper);
  const double a1 = m_logAxis ? std::log10(vr.lower) : vr.lower;
  const double a2 = m_logAxis ? std::log10(vr.upper) : vr.upper;
  m.vy = a2 != a1 ? (vp2 - vp1) / (a2 - a1) : 0;
  m.vy0 = vp1 - m.vy * a1;
  return m;
}

std::pair<int, int> LineBundle::visibleRange(const Series& s, double lo, double hi) const {
  const auto first = std::lower_bound(s.keys.cbegin(), s.keys.cend(), lo) - s.keys.cbegin();
  const auto last = std::upper_bound(s.keys.cbegin(), s.keys.cend(), hi) - s.keys.cbegin();
  return {int(std::max<qsizetype>(0, first - 1)), int(std::min<qsizetype>(s.keys.size(), last + 1))};
}

void LineBundle::draw(QCPPainter* painter) {
  if (!keyAxis() || !valueAxis() || keyAxis()->orientation() != Qt::Horizontal) return;
  updateAxisValues();
  const QRect clip = clipRect();
  if (clip.isEmpty()) return;
  const double dpr = painter->device() ? painter->device()->devicePixelRatioF() : 1.0;
  const QSize size(int(std::ceil(clip.width() * dpr)), int(std::ceil(clip.height() * dpr)));
  if (m_image.size() != size) m_image = QImage(size, QImage::Format_ARGB32_Premultiplied);
  m_image.fill(Qt::transparent);
  const Mapping m = mapping();
  // Few points (a short run, or few layers): antialiased lines, which cost little at that count;
  // many: one span per pixel column, which costs the same for any count.
  const QCPRange keys = keyAxis()->range();
  std::size_t visible = 0;
  for (const auto& series : m_series) {
    const auto [first, last] = visibleRange(series, keys.lower, keys.upper);
    visible += std::size_t(std::max(0, last - first));
  }
  const bool smooth = visible <= kSmoothPoints;
  for (int index = 0; index < seriesCount(); ++index) {
    if (index == m_highlighted) continue;
    if (smooth) {
      stroke(m_series[std::size_t(index)], m, clip.topLeft(), dpr, 1.2);
    } else {
      rasterize(m_series[std::size_t(index)], m, clip.topLeft(), dpr, 0);
    }
  }
  // On top, and three pixels wide (a 2.5 px QPainter polyline alone takes 10 ms here).
  if (m_highlighted >= 0 && m_highlighted < seriesCount()) {
    if (smooth) {
      stroke(m_series[std::size_t(m_highlighted)], m, clip.topLeft(), dpr, 2.5);
    } else {
      rasterize(m_series[std::size_t(m_highlighted)], m, clip.topLeft(), dpr, int(std::lround(dpr)));
    }
  }
  m_image.setDevicePixelRatio(dpr);
  painter->drawImage(clip.topLeft(), m_image);
}

void LineBundle::rasterize(const Series& s, const Mapping& m, QPoint origin, double dpr, int halfWidth) {
  const int width = m_image.width(), height = m_image.height();
  uchar* bits = m_image.bits();
  const qsizetype stride = m_image.bytesPerLine();
  const QRgb color = s.color;
  // One column's vertical extent, in image pixels, widened by halfWidth on every side.
  auto span = [&](int x, double y0, double y1, int half) {
    const double lo = std::max(std::min(y0, y1) - half, -1.0);
    const double hi = std::min(std::max(y0, y1) + half, double(height));
    const int a = std::max(0, int(std::floor(lo))), b = std::min(height - 1, int(std::floor(hi)));
    if (m_dashed && (x / 6) % 2 == 1) return;  // 6 px drawn, 6 left out
    for (int column = std::max(0, x - half); column <= std::min(width - 1, x + half); ++column) {
      for (int y = a; y <= b; ++y) reinterpret_cast<QRgb*>(bits + y * stride)[column] = color;
    }
  };
  const QCPRange keys = keyAxis()->range();
  const auto [first, last] = visibleRange(s, keys.lower, keys.upper);
  bool open = false;  // a run of finite points is being drawn
  int runPoints = 0;  // and how many it has: one alone is drawn as a dot
  const int dot = std::max(halfWidth, int(std::lround(kDotRadius * dpr)));
  int column = 0;
  double low = 0, high = 0, lastX = 0, lastY = 0;
  for (int i = first; i < last; ++i) {
    const double av = s.axisValues[i];
    const bool gap = i > first && s.keys[i] - s.keys[i - 1] > m_maxKeyGap;
    if (!std::isfinite(av) || gap) {
      if (open) span(column, low, high, runPoints == 1 ? dot : halfWidth);
      open = false;
      if (!std::isfinite(av)) continue;
    }
    const double x = std::clamp((m.kx0 + m.kx * s.keys[i] - origin.x()) * dpr, -1e9, 1e9);
    const double y = std::clamp((m.vy0 + m.vy * av - origin.y()) * dpr, -1e9, 1e9);
    const int c = int(std::floor(x));
    runPoints = open ? runPoints + 1 : 1;
    if (open && c == column) {
      low = std::min(low, y);
      high = std::max(high, y);
    } else if (!open) {
      open = true;
      column = c;
      low = high = y;
    } else {
      span(column, low, high, halfWidth);
      // The segment from the last point crosses the columns in between: each gets the part
      // of the line that falls in it.
      double enter = lastY;
      if (c > column + 1) {
        const double slope = (y - lastY) / (x - lastX);
        const int from = std::max(column + 1, 0), to = std::min(c, width);
        enter = lastY + slope * (double(from) - lastX);
        for (int k = from; k < to; ++k) {
          const double leave = lastY + slope * (double(k + 1) - lastX);
          span(k, enter, leave, halfWidth);
          enter = leave;
        }
        if (to < c) enter = y;  // the rest lies beyond the image
      }
      column = c;
      low = std::min(enter, y);
      high = std::max(enter, y);
    }
    lastX = x;
    lastY = y;
  }
  if (open) span(column, low, high, runPoints == 1 ? dot : halfWidth);
}

void LineBundle::stroke(const Series& s, const Mapping& m, QPoint origin, double dpr, double penWidth) {
  QPainter painter(&m_image);
  painter.setRenderHint(QPainter::Antialiasing);
  painter.setPen(QPen(QColor::fromRgba(s.color), penWidth * dpr, m_dashed ? Qt::DashLine : Qt::SolidLine, m_dashed ? Qt::FlatCap : Qt::RoundCap,
                      Qt::RoundJoin));
  const QCPRange keys = keyAxis()->range();
  const auto [first, last] = visibleRange(s, keys.lower, keys.upper);
  QPolygonF run;  // finite points without a gap between them
  auto flush = [&] {
    if (run.size() == 1) {  // a point alone (one step, or between gaps): a dot 5 px across
      painter.setBrush(QColor::fromRgba(s.color));
      painter.drawEllipse(run.front(), kDotRadius * dpr, kDotRadius * dpr);
    }
    if (run.size() > 1) painter.drawPolyline(run);
    run.clear();
  };
  for (int i = first; i < last; ++i) {
    const double av = s.axisValues[i];
    if (!std::isfinite(av) || (i > first && s.keys[i] - s.keys[i - 1] > m_maxKeyGap)) flush();
    if (!std::isfinite(av)) continue;
    run.append(QPointF(std::clamp((m.kx0 + m.kx * s.keys[i] - origin.x()) * dpr, -1e6, 1e6),
                       std::clamp((m.vy0 + m.vy * av - origin.y()) * dpr, -1e6, 1e6)));
  }
  flush();
}

void LineBundle::drawLegendIcon(QCPPainter* painter, const QRectF& rect) const {
  painter->setPen(QPen(m_series.empty() ? QColor(Qt::black) : QColor::fromRgba(m_series.front().color), 1));
  painter->drawLine(QLineF(rect.left(), rect.center().y(), rect.right(), rect.center().y()));
}

std::pair<double, double> LineBundle::keyWindow(double x, double tolerance) const {
  const double k1 = keyAxis()->pixelToCoord(x - tolerance), k2 = keyAxis()->pixelToCoord(x + tolerance);
  return {std::min(k1, k2), std::max(k1, k2)};
}

int LineBundle::seriesAt(const QPointF& pixel, double tolerance, double* distance) const {
  if (!keyAxis() || !valueAxis()) return -1;
  const Mapping m = mapping();
  const auto [k1, k2] = keyWindow(pixel.x(), tolerance);
  int best = -1;
  double bestDistance = tolerance;
  for (int index = 0; index < seriesCount(); ++index) {
    const Series& s = m_series[std::size_t(index)];
    const auto [first, last] = visibleRange(s, k1, k2);
    bool havePrevious = false;
    QPointF previous;
    for (int i = first; i < last; ++i) {
      const double av = s.axisValues[i];
      if (i > first && s.keys[i] - s.keys[i - 1] > m_maxKeyGap) havePrevious = false;
      if (!std::isfinite(av)) {
        havePrevious = false;
        continue;
      }
      const QPointF at(m.kx0 + m.kx * s.keys[i], m.vy0 + m.vy * av);
      const double d = havePrevious ? distanceToSegment(pixel, previous, at) : distanceToSegment(pixel, at, at);
      if (d < bestDistance) {
        bestDistance = d;
        best = index;
      }
      previous = at;
      havePrevious = true;
    }
  }
  if (distance) *distance = bestDistance;
  return best;
}

bool LineBundle::pointAt(const QPointF& pixel, double tolerance, int* series, int* index) const {
  if (!keyAxis() || !valueAxis()) return false;
  const Mapping m = mapping();
  const auto [k1, k2] = keyWindow(pixel.x(), tolerance);
  double best = tolerance;
  bool found = false;
  for (int n = 0; n < seriesCount(); ++n) {
    const Series& s = m_series[std::size_t(n)];
    const auto [first, last] = visibleRange(s, k1, k2);
    for (int i = first; i < last; ++i) {
      const double av = s.axisValues[i];
      if (!std::isfinite(av)) continue;
      const double d = std::hypot(m.kx0 + m.kx * s.keys[i] - pixel.x(), m.vy0 + m.vy * av - pixel.y());
      if (d < best) {
        best = d;
        *series = n;
        *index = i;
        found = true;
      }
    }
  }
  return found;
}

double LineBundle::selectTest(const QPointF& pos, bool onlySelectable, QVariant* details) const {
  Q_UNUSED(details)
  if ((onlySelectable && mSelectable == QCP::stNone) || !keyAxis() || !valueAxis()) return -1;
  if (!keyAxis()->axisRect()->rect().contains(pos.toPoint())) return -1;
  double distance = 0;
  return seriesAt(pos, mParentPlot->selectionTolerance(), &distance) >= 0 ? distance : -1;
}

QCPRange LineBundle::getKeyRange(bool& foundRange, QCP::SignDomain inSignDomain) const {
  // Not a QCPRange yet: its constructor would swap an empty [max, -max] into [-max, max].
  double lower = INFINITY, upper = -INFINITY;
  for (const Series& s : m_series) {
    if (inSignDomain == QCP::sdBoth) {
      lower = std::min(lower, s.keyLow);
      upper = std::max(upper, s.keyHigh);
      continue;
    }
    for (double k : s.keys) {
      if ((inSignDomain == QCP::sdPositive && k <= 0) || (inSignDomain == QCP::sdNegative && k >= 0)) continue;
      lower = std::min(lower, k);
      upper = std::max(upper, k);
    }
  }
  foundRange = lower <= upper;
  return foundRange ? QCPRange(lower, upper) : QCPRange();
}

QCPRange LineBundle::getValueRange(bool& foundRange, QCP::SignDomain inSignDomain, const QCPRange& inKeyRange) const {
  const bool anyKey = inKeyRange == QCPRange();
  double lower = INFINITY, upper = -INFINITY;
  for (const Series& s : m_series) {
    if (anyKey && inSignDomain != QCP::sdNegative) {  // the kept ranges answer
      lower = std::min(lower, inSignDomain == QCP::sdPositive ? s.positiveLow : s.valueLow);
      upper = std::max(upper, inSignDomain == QCP::sdPositive ? s.positiveHigh : s.valueHigh);
      continue;
    }
    for (int i = 0; i < s.values.size(); ++i) {
      const double v = s.values[i];
      if (!std::isfinite(v) || (!anyKey && !inKeyRange.contains(s.keys[i]))) continue;
      if ((inSignDomain == QCP::sdPositive && v <= 0) || (inSignDomain == QCP::sdNegative && v >= 0)) continue;
      lower = std::min(lower, v);
      upper = std::max(upper, v);
    }
  }
  foundRange = lower <= upper;
  return foundRange ? QCPRange(lower, upper) : QCPRange();
}
