#pragma once

#include <QDialog>
#include <QStringList>

class QListWidget;

/// Settings > Operator libraries: the shared libraries of TorchScript operators to load
/// before opening models (a user's TORCH_LIBRARY build, torchvision's _C.so), and the ones
/// this build loads by itself, with whether they loaded.
class OperatorLibrariesDialog : public QDialog {
  Q_OBJECT

public:
  OperatorLibrariesDialog(const QStringList& paths, QWidget* parent = nullptr);
  QStringList paths() const;

private:
  QListWidget* m_list;
};
