#include "panels/RunControls.h"

#include "widgets/ScientificSpinBox.h"

#include <QComboBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QSettings>
#include <QSpinBox>
#include <QToolButton>

using namespace hookscope;

RunControls::RunControls(QWidget* parent) : QWidget(parent) {
  auto* form = new QFormLayout(this);
  form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  m_note = new QLabel(this);
  m_note->setWordWrap(true);
  m_note->setVisible(false);
  form->addRow(m_note);
  m_inputs = new QLineEdit(this);
  m_inputs->setPlaceholderText(tr("e.g. 8x1x28x28 or 8x128:int64:0:30000"));
  m_inputs->setToolTip(tr("One synthetic input per model input, separated by spaces: "
                          "SHAPE[:DTYPE[:LOW:HIGH]]. Floats without bounds are standard normal."));
  form->addRow(tr("&Inputs"), m_inputs);

  auto* dataRow = new QHBoxLayout();
  m_dataFile = new QLineEdit(this);
  m_dataFile->setPlaceholderText(tr("or a torch.save file"));
  m_dataFile->setToolTip(tr("A file written by torch.save: a tensor, or a dict with \"inputs\" "
                            "and optional \"targets\". When set, it replaces the synthetic inputs."));
  auto* browse = new QToolButton(this);
  browse->setText(QStringLiteral("…"));
  connect(browse, &QToolButton::clicked, this, [this] {
    const QString file = QFileDialog::getOpenFileName(this, tr("Data file"), QString(), tr("PyTorch files (*.pt *.pth);;All files (*)"));
    if (!file.isEmpty()) m_dataFile->setText(file);
  });
  dataRow->addWidget(m_dataFile);
  dataRow->addWidget(browse);
  form->addRow(tr("Data"), dataRow);
  m_batchSize = new QSpinBox(this);
  m_batchSize->setRange(0, 1 << 20);
  m_batchSize->setSpecialValueText(tr("whole file"));
  form->addRow(tr("&Batch size"), m_batchSize);

  m_loss = new QComboBox(this);
  for (auto kind : {LossKind::Auto, LossKind::CrossEntropy, LossKind::Mse, LossKind::Mean, LossKind::Sum}) {
    m_loss->addItem(QString::fromLatin1(lossKindName(kind)), int(kind));
  }
  m_loss->setToolTip(tr("auto (the default, as in hookscope-cli): cross_entropy for integer targets, "
                        "mse for float targets; without targets cross_entropy against fixed random "
                        "classes for an [N, classes] output, else mse against fixed random values"));
  m_loss->setCurrentIndex(m_loss->findData(int(LossKind::Auto)));
  form->addRow(tr("&Loss"), m_loss);
  m_optimizer = new QComboBox(this);
  for (auto kind : {OptimizerKind::Sgd, OptimizerKind::Adam, OptimizerKind::None}) {
    m_optimizer->addItem(QString::fromLatin1(optimizerKindName(kind)), int(kind));
  }
  form->addRow(tr("&Optimizer"), m_optimizer);
  m_lr = new ScientificSpinBox(1e-12, 1e6, this);
  m_lr->setValue(0.01);
  m_lr->setToolTip(tr("Any positive number, plain or scientific (3e-4); the arrows multiply or divide by ten"));
  form->addRow(tr("Learnin&g rate"), m_lr);
  m_mode = new QComboBox(this);
  m_mode->addItem(tr("train"));
  m_mode->addItem(tr("eval"));
  m_mode->addItem(tr("eval, no gradients"));
  form->addRow(tr("&Mode"), m_mode);
  m_steps = new QSpinBox(this);
  m_steps->setRange(0, 100000000);
  m_steps->setValue(100);
  m_steps->setSpecialValueText(tr("until stopped"));
  form->addRow(tr("S&teps"), m_steps);
  m_seed = new QSpinBox(this);
  m_seed->setRange(0, 1 << 30);
  form->addRow(tr("S&eed"), m_seed);
  m_bins = new QSpinBox(this);
  m_bins->setRange(1, 4096);
  m_bins->setValue(64);
  form->addRow(tr("Histogram bi&ns"), m_bins);
  m_memoryCap = new QSpinBox(this);
  m_memoryCap->setRange(16, 1 << 20);
  m_memoryCap->setValue(512);
  m_memoryCap->setSuffix(tr(" MiB"));
  m_memoryCap->setToolTip(tr("Captures may use this much memory; beyond it older steps are thinned evenly."));
  connect(m_memoryCap, &QSpinBox::valueChanged, this, [this] { Q_EMIT memoryCapChanged(memoryCapBytes()); });
  form->addRow(tr("Memory &cap"), m_memoryCap);
}

RunConfig RunControls::config() const {
  RunConfig config;
  for (const auto& spec : m_inputs->text().split(QLatin1Char(' '), Qt::SkipEmptyParts)) {
    config.inputSpecs.push_back(spec.toStdString());
  }
  config.dataFile = m_dataFile->text().trimmed().toStdString();
  if (!config.dataFile.empty()) config.inputSpecs.clear();
  config.batchSize = m_batchSize->value();
  config.loss = LossKind(m_loss->currentData().toInt());
  config.optimizer = OptimizerKind(m_optimizer->currentData().toInt());
  config.lr = m_lr->value();
  config.train = m_mode->currentIndex() == 0;
  config.noGrad = m_mode->currentIndex() == 2;
  config.seed = std::uint64_t(m_seed->value());
  config.bins = m_bins->value();
  return config;
}

void RunControls::setConfig(const RunConfig& config) {
  QStringList specs;
  for (const auto& spec : config.inputSpecs) specs << QString::fromStdString(spec);
  m_inputs->setText(specs.join(QLatin1Char(' ')));
  m_dataFile->setText(QString::fromStdString(config.dataFile));
  m_batchSize->setValue(int(config.batchSize));
  m_loss->setCurrentIndex(m_loss->findData(int(config.loss)));
  m_optimizer->setCurrentIndex(m_optimizer->findData(int(config.optimizer)));
  m_lr->setValue(config.lr);
  m_mode->setCurrentIndex(config.noGrad ? 2 : config.train ? 0 : 1);
  m_seed->setValue(int(config.seed));
  m_bins->setValue(config.bins);
}

qint64 RunControls::steps() const { return m_steps->value(); }
QString RunControls::inputSpecs() const { return m_inputs->text(); }
void RunControls::setInputSpecs(const QString& specs) { m_inputs->setText(specs); }
namespace {
QString inputsKey(const QString& path) {
  return QStringLiteral("inputs/") +
         QString::fromLatin1(QFileInfo(path).absoluteFilePath().toUtf8().toBase64(QByteArray::Base64UrlEncoding));
}
}  // namespace

void RunControls::rememberInputs(const QString& modelPath) const {
  if (!inputSpecs().isEmpty()) QSettings().setValue(inputsKey(modelPath), inputSpecs());
}

void RunControls::recallInputs(const QString& modelPath, const QString& example) {
  const QString remembered = QSettings().value(inputsKey(modelPath)).toString();
  setInputSpecs(!remembered.isEmpty() ? remembered : example);
}

void RunControls::showAttached(const QString& scriptName, int worldSize) {
  setEditable(false);
  setNote(worldSize > 1
              ? tr("<b>%1 is attached</b> with the ranks of its torch.distributed job (%2 ranks): their own data, loss "
                   "and optimizer are used, not these. Pause, Step and breakpoints act on every rank at the same step.")
                    .arg(scriptName.toHtmlEscaped())
                    .arg(worldSize)
              : tr("<b>%1 is attached</b>: its own data, loss and optimizer are used, not these.")
                    .arg(scriptName.toHtmlEscaped()));
}

QString RunControls::note() const { return m_note->text(); }

void RunControls::showEnded(const QString& scriptName, const QString& reason) {
  setNote(tr("<b>%1 is no longer attached</b>: %2. Its captures stay: File > Export captures (Ctrl+E) keeps them.")
              .arg(scriptName.toHtmlEscaped(), reason.toHtmlEscaped()));
}

void RunControls::setSteps(int steps) { m_steps->setValue(steps); }
qint64 RunControls::memoryCapBytes() const { return qint64(m_memoryCap->value()) << 20; }

void RunControls::setEditable(bool editable) {
  QWidget* capLabel = static_cast<QFormLayout*>(layout())->labelForField(m_memoryCap);
  for (QWidget* w : findChildren<QWidget*>()) {
    if (w == capLabel) continue;
    // The memory cap (and the spin box's own line edit) applies to every kind of session.
    if (w != m_memoryCap && !m_memoryCap->isAncestorOf(w) && w != m_note) w->setEnabled(editable);
  }
}

void RunControls::showOpened(bool reviewOnly, const std::optional<hookscope::RunConfig>& recorded, qint64 steps,
                             const QString& note) {
  if (reviewOnly && recorded) {
    if (!m_own) {
      m_own = config();
      m_ownSteps = this->steps();
    }
    setConfig(*recorded);
    m_steps->setValue(int(std::min<qint64>(steps, m_steps->maximum())));
  } else if (!reviewOnly && m_own) {
    setConfig(*m_own);
    m_steps->setValue(int(m_ownSteps));
    m_own.reset();
  }
  setEditable(!reviewOnly);
  setNote(note);
}

void RunControls::setNote(const QString& note) {
  m_note->setText(note);
  m_note->setVisible(!note.isEmpty());
  // With a note (an attached script), only the note and the memory cap apply: the rest hides.
  auto* form = static_cast<QFormLayout*>(layout());
  for (int row = 0; row < form->rowCount(); ++row) {
    QLayoutItem* field = form->itemAt(row, QFormLayout::FieldRole);
    QLayoutItem* span = form->itemAt(row, QFormLayout::SpanningRole);
    const bool keep = (span && span->widget() == m_note) || (field && field->widget() == m_memoryCap);
    if (!keep) form->setRowVisible(row, note.isEmpty());
  }
}
