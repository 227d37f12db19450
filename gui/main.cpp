#include "Allocator.h"
#include "MainWindow.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QFileInfo>
#include <QIcon>

int main(int argc, char** argv) {
  hookscope::keepFreedMemory();  // before anything allocates much: see Allocator.h
  QApplication app(argc, argv);
  QApplication::setOrganizationName(QStringLiteral("HookScope"));
  QApplication::setApplicationName(QStringLiteral("HookScope"));
  QApplication::setApplicationVersion(QStringLiteral(HOOKSCOPE_VERSION));
  QApplication::setWindowIcon(QIcon(QStringLiteral(":/icons/hookscope.svg")));
  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral("HookScope: a debugger for neural networks"));
  parser.addHelpOption();
  parser.addVersionOption();
  parser.addPositionalArgument(QStringLiteral("model"), QStringLiteral("TorchScript model file or HookScope export folder"));
  parser.process(app);

  MainWindow window;
  window.show();
  QString path = parser.positionalArguments().value(0);
  if (path.isEmpty()) {
    // The bundled sample model: next to the executable when installed, else in the source tree.
    for (const QString& candidate : {QApplication::applicationDirPath() + QStringLiteral("/../share/hookscope/models/small_cnn.pt"),
                                     QStringLiteral(HOOKSCOPE_SAMPLE_MODEL)}) {
      if (QFileInfo::exists(candidate)) {
        path = candidate;
        break;
      }
    }
  }
  if (!path.isEmpty()) window.openPath(QFileInfo(path).absoluteFilePath());
  return app.exec();
}
