#include "dialogs/CheckpointCompare.h"

#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QHeaderView>
#include <QLabel>
#include <QTableWidget>
#include <QVBoxLayout>

#include <cmath>

bool CheckpointCompare::chooseFiles(QWidget* parent, QString* first, QString* second) {
  if (!first->isEmpty() && !second->isEmpty()) return true;
  const QString filter = tr("Checkpoints (*.pt *.pth *.bin *.safetensors *.ckpt);;All files (*)");
  *first = QFileDialog::getOpenFileName(parent, tr("Compare checkpoints: the first (before)"), QString(), filter);
  if (first->isEmpty()) return false;
  *second = QFileDialog::getOpenFileName(parent, tr("Compare checkpoints: the second (after)"),
                                         QFileInfo(*first).absolutePath(), filter);
  return !second->isEmpty();
}

CheckpointCompare::CheckpointCompare(QWidget* parent) : QDialog(parent) {
  setWindowTitle(tr("Compare checkpoints"));
  resize(900, 560);
  auto* layout = new QVBoxLayout(this);
  m_summary = new QLabel(tr("Reading…"), this);
  m_summary->setWordWrap(true);
  layout->addWidget(m_summary);
  // NaN and Inf counted per file, each in its own column ("2" alone read as either).
  m_table = new QTableWidget(0, 8, this);
  m_table->setHorizontalHeaderLabels({tr("Tensor"), tr("Status"), tr("Norm of change"), tr("Relative"), tr("NaN 1st"),
                                      tr("Inf 1st"), tr("NaN 2nd"), tr("Inf 2nd")});
  m_table->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
  for (int c = 1; c < m_table->columnCount(); ++c) {  // the numbers as wide as they need, the names the rest
    m_table->horizontalHeader()->setSectionResizeMode(c, QHeaderView::ResizeToContents);
  }
  m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_table->verticalHeader()->hide();
  layout->addWidget(m_table);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  layout->addWidget(buttons);
}

QString CheckpointCompare::summary() const { return m_summary->text(); }

void CheckpointCompare::showReading(const QString& first, const QString& second) {
  m_first = first;
  m_second = second;
  m_table->setRowCount(0);
  m_summary->setText(tr("Reading %1 and %2…").arg(QFileInfo(first).fileName(), QFileInfo(second).fileName()));
}

void CheckpointCompare::showFailure(const QString& why) {
  m_summary->setText(why);
  Q_EMIT failed(why);
}

void CheckpointCompare::showTable(const QByteArray& csv) {
  fill(csv);
  Q_EMIT finished();
}

void CheckpointCompare::fill(const QByteArray& csv) {
  const QList<QByteArray> lines = csv.split('\n');
  int changed = 0, unchanged = 0, broken = 0, other = 0;
  for (int i = 1; i < lines.size(); ++i) {  // line 0: the header
    if (lines[i].isEmpty()) continue;
    // tensor,status,norm,relative,nonfinite,nan_first,inf_first,nan_second,inf_second: a tensor's
    // name may hold commas, the rest do not.
    QStringList fields = QString::fromUtf8(lines[i]).split(QLatin1Char(','));
    if (fields.size() < 9) continue;
    const QStringList tail = fields.mid(fields.size() - 8);
    QString name = fields.mid(0, fields.size() - 8).join(QLatin1Char(','));
    if (name.startsWith(QLatin1Char('"')) && name.endsWith(QLatin1Char('"'))) name = name.mid(1, name.size() - 2).replace(QStringLiteral("\"\""), QStringLiteral("\""));
    const QString status = tail[0];
    const int nonfinite = tail[3].toInt();
    status == QStringLiteral("changed") ? ++changed : status == QStringLiteral("unchanged") ? ++unchanged : ++other;
    if (nonfinite) ++broken;
    const int row = m_table->rowCount();
    m_table->insertRow(row);
    const auto number = [](const QString& text) {
      bool ok = false;
      const double v = text.toDouble(&ok);
      return !ok ? text : std::isnan(v) ? QStringLiteral("NaN") : QString::number(v, 'g', 5);
    };
    const QStringList cells{name,    QString(status).replace(QLatin1Char('_'), QLatin1Char(' ')),
                            number(tail[1]), number(tail[2]), tail[4], tail[5], tail[6], tail[7]};
    for (int c = 0; c < cells.size(); ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      if (c >= 2) item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      if (nonfinite) item->setForeground(QColor(0xa4, 0x00, 0x00));
      m_table->setItem(row, c, item);
    }
  }
  m_summary->setText(tr("%1 → %2: %3 changed, %4 unchanged%5%6. Largest relative change first; NaN or Inf first of all.")
                         .arg(QFileInfo(m_first).fileName(), QFileInfo(m_second).fileName())
                         .arg(changed)
                         .arg(unchanged)
                         .arg(broken ? tr(", NaN or Inf in %1").arg(broken) : QString())
                         .arg(other ? tr(", %1 in one only or reshaped").arg(other) : QString()));
}
