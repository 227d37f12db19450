#pragma once

#include "plots/QCustomPlotInclude.h"

#include <QImage>
#include <QVector>

#include <cmath>
#include <limits>

/// Many line series drawn as one plottable. Each series is reduced to one vertical span per
/// pixel column and written straight into an image: 100 series x 2,000 points draw in a few
/// milliseconds, where QPainter polylines take over 40. Values that are NaN, infinite, or not
/// positive on a logarithmic axis leave a gap. One series can be highlighted (drawn thicker).
class LineBundle : public QCPAbstractPlottable {
  Q_OBJECT

public:
  LineBundle(QCPAxis* keyAxis, QCPAxis* valueAxis);

  int seriesCount() const { return int(m_series.size()); }
  /// Drops every series, then makes `count` empty ones.
  void reset(int count);
  void setColor(int series, const QColor& color);
  QColor color(int series) const { return QColor::fromRgba(m_series[std::size_t(series)].color); }
  /// Appends points with keys ascending and greater than the series' last key.
  void append(int series, const QVector<double>& keys, const QVector<double>& values);
  /// Removes the series' last point.
  void removeLast(int series);
  const QVector<double>& keys(int series) const { return m_series[std::size_t(series)].keys; }
  const QVector<double>& values(int series) const { return m_series[std::size_t(series)].values; }
  /// Consecutive points further apart in key than this are not joined: a gap in the data is a
  /// gap in the line.
  void setMaxKeyGap(double gap) { m_maxKeyGap = gap; }
  /// The series drawn 2.5 px wide on top of the others; -1 for none.
  void setHighlighted(int series) { m_highlighted = series; }
  /// Every series dashed (another run's lines over this one's).
  void setDashed(bool dashed) { m_dashed = dashed; }
  /// The lines as last drawn (tests: antialiased edges have partial alpha).
  const QImage& image() const { return m_image; }

  /// The series passing closest to a pixel position, within `tolerance` pixels; -1 when none.
  int seriesAt(const QPointF& pixel, double tolerance, double* distance = nullptr) const;
  /// The drawn point closest to a pixel position, within `tolerance` pixels.
  bool pointAt(const QPointF& pixel, double tolerance, int* series, int* index) const;

  double selectTest(const QPointF& pos, bool onlySelectable, QVariant* details = nullptr) const override;
  QCPRange getKeyRange(bool& foundRange, QCP::SignDomain inSignDomain = QCP::sdBoth) const override;
  QCPRange getValueRange(bool& foundRange, QCP::SignDomain inSignDomain = QCP::sdBoth,
                         const QCPRange& inKeyRange = QCPRange()) const override;

protected:
  void draw(QCPPainter* painter) override;
  void drawLegendIcon(QCPPainter* painter, const QRectF& rect) const override;

private:
  struct Series {
    QVector<double> keys;
    QVector<double> values;
    QVector<double> axisValues;  ///< values as the value axis places them: log10 on a log axis
    QRgb color = 0xff000000;
    // Ranges kept up to date on append, so that fitting the axes each frame does not scan
    // every point: keys, finite values, and finite positive values (for a log axis).
    double keyLow = INFINITY, keyHigh = -INFINITY;
    double valueLow = INFINITY, valueHigh = -INFINITY;
    double positiveLow = INFINITY, positiveHigh = -INFINITY;
    void widen(double key, double value);
    void recomputeRanges();
  };
  /// Maps key and axis value to pixels: x = kx0 + kx * key, y = vy0 + vy * axisValue.
  struct Mapping {
    double kx0, kx, vy0, vy;
  };
  Mapping mapping() const;
  /// Writes one series into m_image; halfWidth > 0 draws it 2 * halfWidth + 1 pixels wide.
  void rasterize(const Series& s, const Mapping& m, QPoint origin, double dpr, int halfWidth);
  /// Draws one series into m_image as antialiased lines `penWidth` pixels wide.
  void stroke(const Series& s, const Mapping& m, QPoint origin, double dpr, double penWidth);
  /// Up to this many visible points in all, lines are antialiased.
  static constexpr std::size_t kSmoothPoints = 20000;
  /// A point with no neighbour to join is a dot this many pixels in radius.
  static constexpr double kDotRadius = 2.5;
  void updateAxisValues();
  double axisValue(double value) const;
  /// The keys within `tolerance` pixels of pixel column x, lower first.
  std::pair<double, double> keyWindow(double x, double tolerance) const;
  /// First and one-past-last point index with keys in [lo, hi], widened by one on each side.
  std::pair<int, int> visibleRange(const Series& s, double lo, double hi) const;

  std::vector<Series> m_series;
  int m_highlighted = -1;
  bool m_dashed = false;
  bool m_logAxis = false;
  double m_maxKeyGap = std::numeric_limits<double>::infinity();
  QImage m_image;
};
