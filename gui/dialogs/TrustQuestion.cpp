#include "dialogs/TrustQuestion.h"

#include <QCoreApplication>
#include <QFileInfo>
#include <QMessageBox>
#include <QPushButton>

QString trustQuestionText(const QString& path, const QString& findings) {
  return QCoreApplication::translate("TrustQuestion",
                                     "%1 holds code that runs when it is opened or stepped and reaches outside "
                                     "HookScope:\n\n%2\nOpen it only if you trust where it came from.")
      .arg(QFileInfo(path).fileName(), findings);
}

bool askToTrust(QWidget* parent, const QString& path, const QString& findings) {
  QMessageBox box(QMessageBox::Warning, QCoreApplication::translate("TrustQuestion", "Untrusted model"),
                  trustQuestionText(path, findings), QMessageBox::Cancel, parent);
  box.setTextFormat(Qt::PlainText);  // the file's name and code, as they are
  QPushButton* open = box.addButton(QCoreApplication::translate("TrustQuestion", "Open anyway"), QMessageBox::AcceptRole);
  box.setDefaultButton(QMessageBox::Cancel);
  box.exec();
  return box.clickedButton() == open;
}
