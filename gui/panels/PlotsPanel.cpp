#include "panels/PlotsPanel.h"

#include "plots/DeviationPlot.h"
#include "plots/GradNormPlot.h"
#include "plots/HeatmapPlot.h"
#include "plots/HistogramPlot.h"
#include "plots/LossPlot.h"
#include "plots/PrecisionPlot.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QSlider>
#include <QSplitter>
#include <QTabBar>
#include <QTabWidget>
#include <QVBoxLayout>

#include <algorithm>

using namespace hookscope;

QSplitter* PlotsPanel::buildGrid() {
  auto* top = m_top = new QSplitter(Qt::Horizontal);
  top->addWidget(m_histogram);
  // Tabs under the plots, so that the headings stay in line with the histogram's.
  m_overSteps = new QTabWidget(this);
  m_overSteps->setTabPosition(QTabWidget::South);
  m_overSteps->setDocumentMode(true);
  // Every tab's name whole: no scroll arrows hiding "Deviation" behind them, or eliding it to
  // "Devi" at 1024 px; the tabs' width is the least this column gets.
  m_overSteps->tabBar()->setUsesScrollButtons(false);
  m_overSteps->tabBar()->setElideMode(Qt::ElideNone);
  m_overSteps->addTab(m_heatmap, tr("Values"));
  m_overSteps->addTab(m_precision, tr("Precision"));
  m_overSteps->addTab(m_deviation, tr("Deviation"));
  m_overSteps->setTabToolTip(0, tr("The selected series' values over steps: its histograms as colour (Ctrl+Shift+D)"));
  m_overSteps->setTabToolTip(1, tr("What float16 would overflow or flush, and fp8 (E4M3, E5M2, scaled to the "
                                   "tensor's largest value) would flush, as % of the selected series' values (Ctrl+Shift+P)"));
  m_overSteps->setTabToolTip(2, tr("Every hooked layer against its own last 200 steps: how many robust deviations its "
                                   "furthest statistic lies from its band, step by step (Ctrl+Shift+B)"));
  top->addWidget(m_overSteps);
  // The deviation view reads every series: it draws when it is shown. A row a layer, named beside
  // its map: shown, it gets at least half the row (at 1024 px it had 190 px, names cut to "…lp.fc1").
  connect(m_overSteps, &QTabWidget::currentChanged, this, [this] {
    fitTopRow();
    refresh();
  });
  auto* bottom = new QSplitter(Qt::Horizontal);
  bottom->addWidget(m_gradNorms);
  bottom->addWidget(m_loss);
  bottom->setStretchFactor(0, 3);
  bottom->setStretchFactor(1, 2);
  auto* grid = new QSplitter(Qt::Vertical);
  grid->addWidget(top);
  grid->addWidget(bottom);
  return grid;
}

PlotsPanel::PlotsPanel(QWidget* parent) : QWidget(parent) {
  m_histogram = new HistogramPlot(this);
  m_heatmap = new HeatmapPlot(this);
  m_gradNorms = new GradNormPlot(this);
  m_loss = new LossPlot(this);
  m_precision = new PrecisionPlot(this);
  m_deviation = new DeviationPlot(this);
  connect(m_heatmap, &HeatmapPlot::deviationRequested, this, &PlotsPanel::showDeviation);
  connect(m_gradNorms, &GradNormPlot::moduleClicked, this, &PlotsPanel::moduleClicked);

  QSplitter* grid = buildGrid();

  m_series = new QComboBox(this);
  // Sized to a short label, not the longest one, so that the bar fits a 1024 px screen.
  m_series->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  m_series->setMinimumContentsLength(6);
  m_series->setToolTip(tr("Which captured tensor of the selected layer the histogram and heatmap show"));
  connect(m_series, &QComboBox::currentIndexChanged, this, [this] { applySeriesChoice(); });
  // A job's ranks: all at once in the plots over steps, or one.
  m_rankChooser = new QComboBox(this);
  m_rankChooser->setToolTip(tr("Which rank of the torch.distributed job the plots show (Alt+R). All ranks: a line per "
                               "rank over steps (a median line and min–max band when ranks are many); the histogram "
                               "shows the lowest rank, with the others' outlines"));
  m_rankChooser->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  m_rankChooser->setMinimumContentsLength(6);
  m_rankLabel = new QLabel(tr("&Rank:"), this);
  m_rankLabel->setBuddy(m_rankChooser);
  m_rankChooser->setVisible(false);
  m_rankLabel->setVisible(false);
  connect(m_rankChooser, &QComboBox::activated, this, [this](int index) { setRank(m_rankChooser->itemData(index).toInt()); });
  m_slider = new QSlider(Qt::Horizontal, this);
  m_slider->setToolTip(tr("Scrub every plot back to an earlier step"));
  m_slider->setEnabled(false);
  m_slider->setMinimumWidth(60);  // still a slider with the rank chooser in the bar at 1024 px
  m_slider->setSingleStep(1);
  m_slider->setPageStep(10);
  // PgDn goes forward in time and PgUp back, as in a document (the slider's own keys do the
  // opposite); Left/Right, Home/End stay the slider's.
  m_slider->installEventFilter(this);
  m_slider->setFocusPolicy(Qt::StrongFocus);
  connect(m_slider, &QSlider::sliderMoved, this, [this](int value) { scrubTo(value); });
  // Keys and clicks on the groove (Left/Right, PgUp/PgDn, Home/End): the position has moved
  // when this is emitted, the value not yet.
  connect(m_slider, &QAbstractSlider::actionTriggered, this, [this](int action) {
    if (action != QAbstractSlider::SliderMove) scrubTo(m_slider->sliderPosition());
  });
  m_stepLabel = new QLabel(tr("no steps yet"), this);
  m_follow = new QCheckBox(tr("&Follow latest"), this);
  m_follow->setChecked(true);
  connect(m_follow, &QCheckBox::toggled, this, [this](bool on) {
    if (!on) return;
    refresh();
    Q_EMIT shownChanged();  // the tree's numbers go to the latest step with the plots
  });

  auto* bar = new QHBoxLayout();
  bar->addWidget(m_rankLabel);
  bar->addWidget(m_rankChooser);
  bar->addWidget(new QLabel(tr("Series:"), this));
  bar->addWidget(m_series);
  bar->addSpacing(12);
  bar->addWidget(new QLabel(tr("Step:"), this));
  bar->addWidget(m_slider, 1);
  bar->addWidget(m_stepLabel);
  bar->addWidget(m_follow);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(grid, 1);
  layout->addLayout(bar);
}

void PlotsPanel::fitTopRow() {
  constexpr int kRoomForStatistics = 640;  // the histogram, its statistics and a 300 px deviation view
  m_histogram->setStatisticsShown(!showsDeviation() || width() >= kRoomForStatistics);  // the top row spans the panel
  const QList<int> sizes = m_top->sizes();
  if (showsDeviation() && sizes.size() == 2 && sizes[1] < sizes[0]) {
    const int half = (sizes[0] + sizes[1]) / 2;
    m_top->setSizes({sizes[0] + sizes[1] - half, half});
  }
}

void PlotsPanel::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  fitTopRow();
}

bool PlotsPanel::eventFilter(QObject* watched, QEvent* event) {
  if (watched == m_slider && event->type() == QEvent::KeyPress) {
    const int key = static_cast<QKeyEvent*>(event)->key();
    if (key == Qt::Key_PageDown || key == Qt::Key_PageUp) {
      stepBy(key == Qt::Key_PageDown ? m_slider->pageStep() : -m_slider->pageStep());
      return true;
    }
  }
  return QWidget::eventFilter(watched, event);
}

QList<PlotPage*> PlotsPanel::pages() const {
  return {m_histogram, m_heatmap, m_precision, m_deviation, m_gradNorms, m_loss};
}

void PlotsPanel::showDeviation() { m_overSteps->setCurrentWidget(m_deviation); }
bool PlotsPanel::showsDeviation() const { return m_overSteps->currentWidget() == m_deviation; }
void PlotsPanel::setModuleOrder(std::vector<std::string> order) {
  m_gradNorms->setModuleOrder(order);
  m_deviation->setModuleOrder(std::move(order));
}

void PlotsPanel::showPrecision(bool precision) { m_overSteps->setCurrentWidget(precision ? static_cast<QWidget*>(m_precision) : m_heatmap); }
bool PlotsPanel::showsPrecision() const { return m_overSteps->currentWidget() == m_precision; }

void PlotsPanel::setStore(std::shared_ptr<CaptureStore> store) {
  m_state = ViewState();
  m_finishedStep = -1;
  m_state.store = std::move(store);
  m_module.clear();  // a module of what was open before: the tree says which is selected now
  m_choices.clear();
  m_series->clear();
  m_rankNotes.clear();
  m_rankChooser->clear();
  m_follow->setChecked(true);
  for (PlotPage* page : pages()) page->resetView();
  refresh();
}

QStringList PlotsPanel::saveAll(const QString& dir) const {
  m_deviation->drawNow(m_state);  // drawn while its tab was hidden too
  QStringList failed;
  for (PlotPage* page : pages()) {
    const QString base = QDir(dir).filePath(page->fileName());
    const bool ok = page->savePng(base + QStringLiteral(".png")) && page->savePdf(base + QStringLiteral(".pdf")) &&
                    page->saveCsv(base + QStringLiteral(".csv"));
    if (!ok) failed << page->title();
  }
  return failed;
}

void PlotsPanel::setComparedStore(std::shared_ptr<CaptureStore> run) {
  m_state.compared = std::move(run);
  refresh();
}

void PlotsPanel::setRank(int rank) {
  m_state.rank = rank;
  for (int i = 0; i < m_rankChooser->count(); ++i) {
    if (m_rankChooser->itemData(i).toInt() == rank) m_rankChooser->setCurrentIndex(i);
  }
  updateSeriesChoices();
  refresh();
  Q_EMIT shownChanged();
}

void PlotsPanel::setRankNote(int rank, const QString& note) {
  if (note.isEmpty()) {
    m_rankNotes.erase(rank);
  } else {
    m_rankNotes[rank] = note;
  }
  updateRankChoices();  // the labels differ: the chooser is filled again
}

void PlotsPanel::updateRankChoices() {
  m_state.ranks = m_state.store ? m_state.store->ranks() : std::vector<int>{};
  const bool job = m_state.ranks.size() > 1;
  m_rankChooser->setVisible(job);
  m_rankLabel->setVisible(job);
  if (m_state.rank >= 0 && std::find(m_state.ranks.begin(), m_state.ranks.end(), m_state.rank) == m_state.ranks.end() && job) {
    m_state.rank = -1;
  }
  QStringList items;
  QList<int> ranks;
  if (job) {
    items << tr("All ranks");
    ranks << -1;
    for (int rank : m_state.ranks) {
      const auto note = m_rankNotes.find(rank);
      items << (note == m_rankNotes.end() ? tr("Rank %1").arg(rank) : tr("Rank %1 (%2)").arg(rank).arg(note->second));
      ranks << rank;
    }
  }
  QStringList current;
  for (int i = 0; i < m_rankChooser->count(); ++i) current << m_rankChooser->itemText(i);
  if (items != current) {
    QSignalBlocker block(m_rankChooser);
    m_rankChooser->clear();
    for (int i = 0; i < items.size(); ++i) m_rankChooser->addItem(items[i], ranks[i]);
  }
  const int at = ranks.indexOf(m_state.rank);
  if (at >= 0 && m_rankChooser->currentIndex() != at) {
    QSignalBlocker block(m_rankChooser);
    m_rankChooser->setCurrentIndex(at);
  }
}

void PlotsPanel::setSelectedModule(const std::string& path, const std::string& type) {
  m_module = path;
  m_state.selectedType = type;
  updateSeriesChoices();
  refresh();
}

void PlotsPanel::showKind(CaptureKind kind) {
  updateSeriesChoices();
  for (std::size_t i = 0; i < m_choices.size(); ++i) {
    if (m_choices[i].kind == kind) {
      m_series->setCurrentIndex(int(i));  // applySeriesChoice, through the combo box's signal
      return;
    }
  }
}

void PlotsPanel::setSelectedHooks(std::uint8_t mask) {
  if (m_state.selectedHooks == mask) return;
  m_state.selectedHooks = mask;
  refresh();
}

void PlotsPanel::updateSeriesChoices() {
  std::vector<SeriesKey> choices;
  if (m_state.store) {
    // The layer's own series first, then its sharded tensors' wholes, then its parameters'
    // (captured as "fc1.weight"): a sharded one's on this rank is its shard.
    std::vector<SeriesKey> parameters, wholes;
    const int rank = m_state.shownRank();
    for (const auto& key : m_state.store->seriesKeys()) {
      if (ownerModule(key) != m_module || (key.rank != rank && key.rank != kWholeRank)) continue;
      (key.rank == kWholeRank ? wholes : isParameterKind(key.kind) ? parameters : choices).push_back(key);
    }
    m_sharded.clear();
    for (auto key : wholes) {
      key.rank = rank;
      m_sharded.insert(key);
    }
    choices.insert(choices.end(), wholes.begin(), wholes.end());
    choices.insert(choices.end(), parameters.begin(), parameters.end());
  }
  if (choices == m_choices) {
    // Nothing to choose, before or now: the hint names the module selected now, not the last.
    if (m_choices.empty()) m_state.selected = SeriesKey{m_module, 0, CaptureKind::Activation, 0, m_state.shownRank()};
    return;
  }
  const SeriesKey previous = m_state.selected;
  m_choices = choices;
  QSignalBlocker block(m_series);
  m_series->clear();
  int keep = 0, longest = 6;
  for (std::size_t i = 0; i < m_choices.size(); ++i) {
    const auto& key = m_choices[i];
    QString label = QString::fromLatin1(captureKindName(key.kind));
    if (isParameterKind(key.kind)) {
      label += QStringLiteral(" ") + QString::fromStdString(key.module.substr(key.module.rfind('.') + 1));
    } else {
      if (key.call > 0) label += tr(" · call %1").arg(key.call);
      if (key.index > 0) label += tr(" · tensor %1").arg(key.index);
    }
    // A sharded tensor's whole, and this rank's piece of it, say so first: a narrow box cuts
    // the end of a label, and they must not look alike.
    if (key.rank == kWholeRank) label = tr("whole · ") + label;
    if (m_sharded.count(key)) label = tr("shard · ") + label;
    m_series->addItem(label);
    longest = std::max(longest, int(label.size()));
    // The same tensor on another rank is the same choice; a whole stays whole, a shard a shard.
    if (sameTensor(key, previous) && (key.rank == kWholeRank) == (previous.rank == kWholeRank)) keep = int(i);
  }
  // Wide enough for "param weight" or "activation · call 1" whole; longer ones are cut with "…".
  m_series->setMinimumContentsLength(std::min(longest, 18));
  if (!(m_state.hasSelection && keep < int(m_choices.size()) && sameTensor(m_choices[std::size_t(keep)], previous))) {
    keep = defaultSeries();
  }
  m_series->setCurrentIndex(keep);
  applySeriesChoice();
}

int PlotsPanel::defaultSeries() const {
  // The tensor that holds NaN or Inf at the step shown (what the tree marked red), else the
  // activation of the first call, else the first.
  int activation = -1;
  for (std::size_t i = 0; i < m_choices.size(); ++i) {
    SeriesPoint point;
    if (m_state.store->pointAt(m_choices[i], std::max<std::int64_t>(0, m_state.step), &point) && point.stats.hasNonFinite()) {
      return int(i);
    }
    if (activation < 0 && m_choices[i].kind == CaptureKind::Activation) activation = int(i);
  }
  return std::max(activation, 0);
}

void PlotsPanel::applySeriesChoice() {
  const int i = m_series->currentIndex();
  m_state.hasSelection = i >= 0 && std::size_t(i) < m_choices.size();
  if (m_state.hasSelection) {
    m_state.selected = m_choices[std::size_t(i)];
  } else {
    m_state.selected = SeriesKey{m_module, 0, CaptureKind::Activation, 0, m_state.shownRank()};
  }
  for (PlotPage* page : pages()) page->refresh(m_state);
}

void PlotsPanel::refresh() {
  m_state.latestStep = !m_state.store ? -1 : m_finishedStep >= 0 ? std::min(m_finishedStep, m_state.store->latestStep())
                                                                    : m_state.store->latestStep();
  if (m_follow->isChecked()) m_state.step = m_state.latestStep;
  updateRankChoices();
  updateSeriesChoices();
  m_state.hasSelection = !m_choices.empty() && m_series->currentIndex() >= 0;
  m_slider->setEnabled(m_state.latestStep > 0);
  m_slider->setRange(0, int(std::max<std::int64_t>(0, m_state.latestStep)));
  if (!m_slider->isSliderDown()) m_slider->setValue(int(std::max<std::int64_t>(0, m_state.step)));
  m_stepLabel->setText(m_state.step < 0 ? tr("no steps yet")
                                        : tr("%1 of 0–%2").arg(m_state.step).arg(m_state.latestStep));
  // As wide as its widest text at this latest step, so that scrubbing does not move the bar.
  m_stepLabel->setMinimumWidth(m_stepLabel->fontMetrics().horizontalAdvance(
      m_state.step < 0 ? m_stepLabel->text() : tr("%1 of 0–%1").arg(m_state.latestStep)));
  for (PlotPage* page : pages()) page->refresh(m_state);
}

void PlotsPanel::scrubTo(std::int64_t step) {
  m_follow->setChecked(false);
  m_state.step = std::clamp<std::int64_t>(step, 0, std::max<std::int64_t>(0, m_state.latestStep));
  refresh();
  Q_EMIT shownChanged();
}

void PlotsPanel::stepBy(std::int64_t delta) {
  if (m_state.step >= 0) scrubTo(m_state.step + delta);
}

QString PlotsPanel::stepText() const { return m_stepLabel->text(); }

void PlotsPanel::setFollowLatest(bool follow) { m_follow->setChecked(follow); }
bool PlotsPanel::followsLatest() const { return m_follow->isChecked(); }
