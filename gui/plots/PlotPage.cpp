#include "plots/PlotPage.h"

#include "models/PathElideDelegate.h"
#include "plots/ReadableLogTicker.h"
#include "plots/ReadableTicker.h"

#include <QResizeEvent>

#include "plots/QCustomPlotInclude.h"

#include <QEvent>
#include <QFileDialog>
#include <QMenu>
#include <QMessageBox>
#include <QPainter>
#include <QSaveFile>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

PlotPage::PlotPage(const QString& title, QWidget* parent) : QWidget(parent), m_plot(new QCustomPlot(this)), m_title(title) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(m_plot);
  m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  for (QCPAxis* axis : {m_plot->xAxis, m_plot->yAxis}) axis->setTicker(QSharedPointer<QCPAxisTicker>(new ReadableTicker));
  m_plot->plotLayout()->insertRow(0);
  auto* heading = new QCPTextElement(m_plot, title, QFont(font().family(), font().pointSize(), QFont::Bold));
  m_plot->plotLayout()->addElement(0, 0, heading);
  connect(m_plot, &QCustomPlot::afterLayout, this, &PlotPage::fitHeading);
  m_plot->setMinimumSize(132, 150);  // two plots, the statistics and whole tab names fit beside the tree at 1024 px
  // The marker lives on its own buffered layer so that moving it repaints nothing else.
  m_plot->addLayer(QStringLiteral("marker"), m_plot->layer(QStringLiteral("main")), QCustomPlot::limAbove);
  m_plot->layer(QStringLiteral("marker"))->setMode(QCPLayer::lmBuffered);
  m_marker = new QCPItemStraightLine(m_plot);
  m_marker->setLayer(QStringLiteral("marker"));
  m_marker->setPen(QPen(QColor(120, 120, 120), 1, Qt::DashLine));
  m_marker->setVisible(false);
  // A range change that is not a fit comes from the user's wheel or drag.
  for (QCPAxis* axis : {m_plot->xAxis, m_plot->yAxis}) {
    connect(axis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this, [this] {
      if (!m_fitting) m_userView = true;
    });
  }
  connect(m_plot, &QCustomPlot::mouseDoubleClick, this, [this] { fitToData(); });
  // As many ticks as fit: a narrow plot (a heatmap beside its colour scale at 1024x700) ran
  // its step labels into each other ("255075100"); under 140 px it aims at two (ReadableTicker
  // keeps two inside the range).
  // The axis rect is the last layout's, and a resize replots before laying out again: the
  // plot's size now less the margins the last layout left around the axis rect (a window made
  // smaller kept the larger one's ticks on a static plot, "-0.2-0.1").
  connect(m_plot, &QCustomPlot::afterLayout, this, [this] {
    const QRect area = m_plot->axisRect()->rect();
    m_axisMargins = QSize(m_plot->viewport().width() - area.width(), m_plot->viewport().height() - area.height());
  });
  connect(m_plot, &QCustomPlot::beforeReplot, this, [this] {
    const int width = m_plot->width() - m_axisMargins.width(), height = m_plot->height() - m_axisMargins.height();
    m_plot->xAxis->ticker()->setTickCount(std::clamp(width / 70, 2, 6));
    m_plot->yAxis->ticker()->setTickCount(std::clamp(height / 45, 2, 6));
    // And no more ticks than labels of the range's width fit side by side, measured as the axis
    // writes them (its format and precision: "-100000", where 'g' with 4 digits said "-1e+05").
    if (auto* ticker = dynamic_cast<ReadableTicker*>(m_plot->xAxis->ticker().data())) {
      const QCPAxis* axis = m_plot->xAxis;
      const QFontMetrics metrics(axis->tickLabelFont());
      const QCPRange range = axis->range();
      const char format = axis->numberFormat().isEmpty() ? 'g' : axis->numberFormat().at(0).toLatin1();
      const auto written = [&](double value) {
        return metrics.horizontalAdvance(m_plot->locale().toString(value, format, axis->numberPrecision()));
      };
      const int label = std::max(written(range.lower), written(range.upper));
      ticker->setMaxTicks(width / (label + metrics.horizontalAdvance(QLatin1Char(' ')) * 2));
    }
  });
  m_plot->setContextMenuPolicy(Qt::CustomContextMenu);
  connect(m_plot, &QWidget::customContextMenuRequested, this, &PlotPage::showContextMenu);
  applyPalette();
}

bool PlotPage::saveCsv(const QString& path) const {
  QSaveFile file(path);
  return file.open(QIODevice::WriteOnly) && file.write(toCsv().toUtf8()) >= 0 && file.commit();
}

void PlotPage::showContextMenu(const QPoint& at) {
  QMenu menu(this);
  const QString base = fileName();
  auto save = [this, base](const QString& suffix, const QString& filter, bool (PlotPage::*write)(const QString&) const) {
    const QString path = QFileDialog::getSaveFileName(this, tr("Save %1").arg(m_title), base + suffix, filter);
    if (!path.isEmpty() && !(this->*write)(path)) {
      QMessageBox::warning(this, tr("Save plot"), tr("Could not write %1: check that the folder is writable.").arg(path));
    }
  };
  menu.addAction(tr("Save as PNG…"), this, [=] { save(QStringLiteral(".png"), tr("PNG images (*.png)"), &PlotPage::savePng); });
  menu.addAction(tr("Save as PDF…"), this, [=] { save(QStringLiteral(".pdf"), tr("PDF documents (*.pdf)"), &PlotPage::savePdf); });
  menu.addAction(tr("Save data as CSV…"), this, [=] { save(QStringLiteral(".csv"), tr("CSV files (*.csv)"), &PlotPage::saveCsv); });
  menu.addSeparator();
  menu.addAction(tr("Fit to data (double-click)"), this, &PlotPage::fitToData);
  if (m_offersLogScale) {
    QAction* log = menu.addAction(tr("Logarithmic axis"), this, [this](bool on) { setLogScale(on); });
    log->setCheckable(true);
    log->setChecked(m_log);
  }
  addMenuActions(&menu);
  menu.exec(m_plot->mapToGlobal(at));
}

void PlotPage::setLogScale(bool on) {
  m_log = on;
  m_plot->yAxis->setScaleType(on ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
  if (on) {
    m_plot->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>(new ReadableLogTicker));
  } else {
    m_plot->yAxis->setTicker(QSharedPointer<QCPAxisTicker>(new ReadableTicker));
  }
  logScaleChanged();
}

void PlotPage::fitAxes() { m_plot->rescaleAxes(); }

QCPRange PlotPage::paddedRange(double lo, double hi, bool log) {
  if (log) {
    if (!(lo > 0)) lo = hi > 0 ? hi / 10 : 1e-3;
    if (!(hi > 0)) hi = lo * 10;
    const double decades = std::max(std::log10(hi / lo), 0.3);
    const double factor = std::pow(10.0, 0.05 * decades);
    return QCPRange(lo / factor, hi * factor);
  }
  const double pad = hi > lo ? 0.05 * (hi - lo) : std::max(1e-6, 0.05 * std::abs(lo));
  return QCPRange(lo - pad, hi + pad);
}

QCPRange PlotPage::stepRange(double first, double last) {
  return last > first ? QCPRange(first, last) : QCPRange(first - 1, last + 1);
}

void PlotPage::autoFit() {
  if (m_userView) return;
  m_fitting = true;
  fitAxes();
  m_fitting = false;
}

void PlotPage::resetView() {
  m_fitting = true;  // not a view the user chose
  for (QCPAxis* axis : m_plot->axisRect()->axes()) {
    axis->setRange(axis->scaleType() == QCPAxis::stLogarithmic ? QCPRange(1e-3, 1) : QCPRange(0, 5));
  }
  m_fitting = false;
  m_userView = false;
  setStepMarker(0, false);
  m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void PlotPage::fitToData() {
  m_userView = false;
  autoFit();
  m_plot->replot(QCustomPlot::rpQueuedReplot);
}

QString PlotPage::fileName() const { return m_title.toLower().replace(' ', '_'); }

bool PlotPage::savePng(const QString& path) const { return m_plot->savePng(path, 0, 0, 2.0); }
bool PlotPage::savePdf(const QString& path) const { return m_plot->savePdf(path); }

bool PlotPage::savePngWithLegend(const QString& path, const std::vector<std::pair<QString, QColor>>& entries) const {
  constexpr double kScale = 2.0;  // as savePng
  const QPixmap plot = m_plot->toPixmap(0, 0, kScale);
  const QFontMetrics metrics(m_plot->font());
  const int width = m_plot->width(), swatch = 18, gap = 6, lineHeight = metrics.height() + 4;
  int widest = 0;
  for (const auto& entry : entries) widest = std::max(widest, metrics.horizontalAdvance(entry.first));
  const int cell = std::min(swatch + gap + widest + 3 * gap, width - 2 * gap);
  const int columns = std::max(1, (width - 2 * gap) / cell);
  const int rows = int(entries.size() + std::size_t(columns) - 1) / columns;
  QImage image(plot.width(), plot.height() + int(std::ceil((rows * lineHeight + 2 * gap) * kScale)),
               QImage::Format_ARGB32_Premultiplied);
  image.fill(palette().color(QPalette::Base));
  QPainter painter(&image);
  painter.drawPixmap(0, 0, plot);
  painter.scale(kScale, kScale);
  painter.setRenderHint(QPainter::Antialiasing);
  painter.setFont(m_plot->font());
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const int x = gap + int(i % std::size_t(columns)) * cell;
    const int y = int(plot.height() / kScale) + gap + int(i / std::size_t(columns)) * lineHeight;
    painter.setPen(QPen(entries[i].second, 2.5));
    painter.drawLine(QLineF(x, y + lineHeight / 2.0, x + swatch, y + lineHeight / 2.0));
    painter.setPen(palette().color(QPalette::Text));
    const QString name = PathElideDelegate::elidePath(entries[i].first, metrics, cell - swatch - 2 * gap);
    painter.drawText(QRect(x + swatch + gap, y, cell - swatch - gap, lineHeight), Qt::AlignVCenter | Qt::AlignLeft, name);
  }
  painter.end();
  return image.save(path);
}

namespace {

/// Whole steps only: at least 1 between ticks (2.5 or 12.5 become 5 and 25: wider, unless that
/// leaves fewer than two ticks inside the range, then 2 and 10), no sub-ticks between steps.
class StepTicker : public ReadableTicker {
protected:
  double getTickStep(const QCPRange& range) override {
    const double step = ReadableTicker::getTickStep(range);
    if (step <= 1.0) return 1.0;
    if (step == std::floor(step)) return step;
    return ticksInside(range, 2 * step) >= 2 ? 2 * step : std::max(1.0, std::floor(step));
  }
  int getSubTickCount(double tickStep) override { return tickStep <= 1.0 ? 0 : QCPAxisTicker::getSubTickCount(tickStep); }
};

}  // namespace

QCPItemText* PlotPage::addCentredNote() {
  auto* note = new QCPItemText(m_plot);
  note->position->setType(QCPItemPosition::ptAxisRectRatio);
  note->position->setCoords(0.5, 0.5);
  note->setPositionAlignment(Qt::AlignCenter);
  note->setTextAlignment(Qt::AlignCenter);
  note->setClipToAxisRect(false);
  return note;
}

void PlotPage::setStepAxis() {
  m_plot->xAxis->setLabel(tr("step"));
  m_plot->xAxis->setTicker(QSharedPointer<QCPAxisTicker>(new StepTicker));
}

void PlotPage::changeEvent(QEvent* event) {
  if (event->type() == QEvent::PaletteChange) {
    applyPalette();
    m_plot->replot(QCustomPlot::rpQueuedReplot);
  }
  QWidget::changeEvent(event);
}

void PlotPage::applyPalette() {
  const QPalette p = palette();
  m_plot->setBackground(p.color(QPalette::Base));
  for (QCPAxis* axis : m_plot->axisRect()->axes()) {
    axis->setBasePen(QPen(p.color(QPalette::Text)));
    axis->setTickPen(QPen(p.color(QPalette::Text)));
    axis->setSubTickPen(QPen(p.color(QPalette::Text)));
    axis->setTickLabelColor(p.color(QPalette::Text));
    axis->setLabelColor(p.color(QPalette::Text));
  }
  if (auto* heading = qobject_cast<QCPTextElement*>(m_plot->plotLayout()->element(0, 0))) {
    heading->setTextColor(p.color(QPalette::Text));
  }
  m_plot->legend->setBrush(p.color(QPalette::Base));
  m_plot->legend->setTextColor(p.color(QPalette::Text));
}

QString PlotPage::heading() const {
  const auto* element = qobject_cast<QCPTextElement*>(m_plot->plotLayout()->element(0, 0));
  return element ? element->text() : m_title;
}

void PlotPage::setHeading(const QString& text, const QString& shortText) {
  m_heading = text;
  m_shortHeading = shortText;
  fitHeading();
}

bool PlotPage::headingFits(const QString& text) const {
  const auto* element = qobject_cast<QCPTextElement*>(m_plot->plotLayout()->element(0, 0));
  if (!element) return true;
  // The heading's own cell once laid out (beside a color scale it is narrower than the plot).
  const int room = element->outerRect().width() > 0 ? element->outerRect().width() : m_plot->width();
  return QFontMetrics(element->font()).horizontalAdvance(text) + 8 <= room;
}

bool PlotPage::headingFits() const { return headingFits(heading()); }

void PlotPage::fitHeading() {
  auto* element = qobject_cast<QCPTextElement*>(m_plot->plotLayout()->element(0, 0));
  if (!element) return;
  const QString full = m_heading.isEmpty() ? m_title : m_heading;
  const QString text = headingFits(full) || m_shortHeading.isEmpty() ? full : m_shortHeading;
  if (element->text() != text) {
    element->setText(text);
    m_plot->replot(QCustomPlot::rpQueuedReplot);
  }
}

void PlotPage::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  fitHeading();
}

void PlotPage::replotMarker() { m_plot->layer(QStringLiteral("marker"))->replot(); }

void PlotPage::setStepMarker(double step, bool visible) {
  m_marker->setVisible(visible);
  // Two points at y = 1 and 2 define a vertical line on linear and log axes alike.
  m_marker->point1->setCoords(step, 1);
  m_marker->point2->setCoords(step, 2);
}
