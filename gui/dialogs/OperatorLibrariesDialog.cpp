#include "dialogs/OperatorLibrariesDialog.h"


#include <QDialogButtonBox>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QVBoxLayout>

OperatorLibrariesDialog::OperatorLibrariesDialog(const QStringList& paths, QWidget* parent)
    : QDialog(parent), m_list(new QListWidget(this)) {
  setWindowTitle(tr("Operator libraries"));
  auto* layout = new QVBoxLayout(this);
  auto* intro = new QLabel(
      tr("Models that use operators from outside PyTorch (torchvision::nms, your own "
         "TORCH_LIBRARY build) need the shared library that registers them, built for PyTorch %1. "
         "Each model's engine process loads them before it checks the model's code and loads the model. "
         "Removing one takes effect for the next model opened.")
          .arg(QStringLiteral(HOOKSCOPE_ENGINE_TORCH_VERSION)),
      this);
  intro->setWordWrap(true);
  layout->addWidget(intro);
  m_list->addItems(paths);
  layout->addWidget(m_list);
  auto* row = new QHBoxLayout;
  auto* add = new QPushButton(tr("&Add…"), this);
  auto* remove = new QPushButton(tr("&Remove"), this);
  row->addWidget(add);
  row->addWidget(remove);
  row->addStretch();
  layout->addLayout(row);
  // The window links no LibTorch; each engine process loads these before it opens a model.
  auto* builtIn = new QLabel(tr("Each model opens in an engine process that loads these libraries first, and "
                                "torchvision's by itself when it is installed beside the engine's PyTorch."),
                             this);
  builtIn->setWordWrap(true);
  layout->addWidget(builtIn);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
  layout->addWidget(buttons);
  connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  connect(add, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Add operator library"), QString(),
                                                      tr("Shared libraries (*.so *.so.*);;All files (*)"));
    if (!path.isEmpty() && m_list->findItems(path, Qt::MatchExactly).isEmpty()) m_list->addItem(path);
  });
  connect(remove, &QPushButton::clicked, this, [this] { delete m_list->currentItem(); });
  resize(560, 320);
}

QStringList OperatorLibrariesDialog::paths() const {
  QStringList result;
  for (int i = 0; i < m_list->count(); ++i) result << m_list->item(i)->text();
  return result;
}
