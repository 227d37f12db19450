#include "dialogs/AttachDialog.h"

#include <QApplication>
#include <QClipboard>
#include <QDialogButtonBox>
#include <QFontDatabase>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QVBoxLayout>

AttachDialog::AttachDialog(QWidget* parent) : QDialog(parent) {
  setWindowTitle(tr("Attach to a training script"));
  auto* layout = new QVBoxLayout(this);
  m_status = new QLabel(this);
  m_status->setWordWrap(true);
  m_text = new QPlainTextEdit(this);
  m_text->setReadOnly(true);
  m_text->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  m_text->setMinimumSize(560, 220);
  auto* buttons = new QDialogButtonBox(this);
  QPushButton* copy = buttons->addButton(tr("&Copy"), QDialogButtonBox::ActionRole);
  QPushButton* cancel = buttons->addButton(tr("&Stop waiting"), QDialogButtonBox::RejectRole);
  buttons->addButton(QDialogButtonBox::Close);
  connect(copy, &QPushButton::clicked, this, [this] { QApplication::clipboard()->setText(instructions()); });
  connect(cancel, &QPushButton::clicked, this, [this] {
    Q_EMIT cancelled();
    hide();
  });
  connect(buttons->button(QDialogButtonBox::Close), &QPushButton::clicked, this, &QDialog::hide);
  layout->addWidget(m_status);
  layout->addWidget(m_text, 1);
  layout->addWidget(buttons);
}

void AttachDialog::setAddress(const QString& address) {
  m_status->setText(tr("HookScope is waiting for a training script at <b>%1</b>. Run your script with the "
                       "address below; the first script to attach replaces the open model. Its inputs, loss "
                       "and optimizer stay the script's own.")
                        .arg(address.toHtmlEscaped()));
  m_text->setPlainText(QStringLiteral("HOOKSCOPE_ADDRESS=%1 python train.py\n\n"
                                      "# in train.py (PYTHONPATH=<HookScope>/python, or pip install ./python):\n"
                                      "import hookscope\n"
                                      "hs = hookscope.attach(model, optimizer)\n"
                                      "for x, y in loader:\n"
                                      "    ...\n"
                                      "    optimizer.step()\n"
                                      "    hs.step(loss)   # sends the loss; obeys Pause, Step and breakpoints\n"
                                      "hs.close()\n")
                           .arg(address));
}

QString AttachDialog::instructions() const { return m_text->toPlainText(); }
