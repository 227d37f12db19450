// hookscope-report: the program behind `hookscope-cli report` (which keeps no Qt itself). Draws
// with the window's plot code on Qt's offscreen platform: no display needed.
#include "common/ProgressLine.h"
#include "files/ExportFolder.h"
#include "report/Report.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QFile>
#include <QTemporaryDir>

#include <algorithm>
#include <cstdio>
#include <optional>

int main(int argc, char** argv) {
  if (!qEnvironmentVariableIsSet("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  // A server or CI job often has no XDG_RUNTIME_DIR, and Qt then makes $TMPDIR/runtime-$USER and
  // leaves it behind: a private one of our own instead, removed when the report is written.
  // Nothing here needs one, so Qt need not say so either.
  std::optional<QTemporaryDir> runtime;
  if (qEnvironmentVariableIsEmpty("XDG_RUNTIME_DIR")) {
    runtime.emplace(QDir::tempPath() + QStringLiteral("/hookscope-report-XXXXXX"));
    if (runtime->isValid()) qputenv("XDG_RUNTIME_DIR", QFile::encodeName(runtime->path()));
  }
  static const QtMessageHandler qtHandler = qInstallMessageHandler(nullptr);
  // Nor need the offscreen platform say, for every plot drawn, that it does not support
  // propagateSizeHints(): nothing here is shown on a screen (28 such lines came before "wrote").
  qInstallMessageHandler([](QtMsgType type, const QMessageLogContext& context, const QString& text) {
    if (!text.contains(QStringLiteral("XDG_RUNTIME_DIR")) && !text.contains(QStringLiteral("propagateSizeHints"))) {
      qtHandler(type, context, text);
    }
  });
  QApplication app(argc, argv);
  QApplication::setApplicationName(QStringLiteral("hookscope-report"));
  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral("Write a self-contained HTML report of a HookScope export."));
  parser.addHelpOption();
  parser.addPositionalArgument(QStringLiteral("run"), QStringLiteral("export folder"));
  parser.addOption({QStringLiteral("out"), QStringLiteral("the HTML file to write"), QStringLiteral("FILE")});
  parser.addOption({QStringLiteral("layer"), QStringLiteral("a layer to draw a heatmap of (repeatable)"), QStringLiteral("PATH")});
  parser.addOption({QStringLiteral("max-layers"), QStringLiteral("heatmaps drawn without --layer"), QStringLiteral("N"),
                    QStringLiteral("16")});
  parser.addOption({QStringLiteral("force"), QStringLiteral("replace an existing file")});
  parser.addOption({QStringLiteral("compare"), QStringLiteral("a second export drawn with it"), QStringLiteral("RUN")});
  parser.addOption({QStringLiteral("memory-cap"), QStringLiteral("MiB each export's captures may take in memory"),
                    QStringLiteral("MIB"), QStringLiteral("0")});
  parser.process(app);
  ReportRequest request;
  const QStringList positional = parser.positionalArguments();
  request.out = parser.value(QStringLiteral("out"));
  if (positional.size() != 1 || request.out.isEmpty()) {
    std::fprintf(stderr, "hookscope-cli: usage: hookscope-cli report RUN --out FILE.html [--layer PATH ...] [--force]\n");
    return 2;
  }
  request.run = positional.front();
  request.layers = parser.values(QStringLiteral("layer"));
  request.maxLayers = std::max(0, parser.value(QStringLiteral("max-layers")).toInt());
  request.force = parser.isSet(QStringLiteral("force"));
  request.compare = parser.value(QStringLiteral("compare"));
  request.capBytes = hookscope::readingCapBytes(parser.value(QStringLiteral("memory-cap")).toLongLong());
  // A long export takes seconds to read and draw: said past the first second.
  hookscope::ProgressLine progress("report", "starting");
  request.onStage = [&progress](const QString& what) { progress.stage(what.toStdString()); };
  ReportContents contents;
  QString error;
  const ReportResult result = writeReport(request, &contents, &error);
  if (result != ReportResult::Written) {
    progress.stop();
    std::fprintf(stderr, "hookscope-cli: %s\n", qPrintable(error));
    return result == ReportResult::CannotWrite ? 5 : 4;  // hookscope-cli's exit codes
  }
  progress.finish();
  for (const QString& thinned : contents.thinnedReads) {
    std::fprintf(stderr, "hookscope-cli (note): %s: the report is of those steps; --memory-cap MIB reads more of them\n",
                 qPrintable(thinned));
  }
  std::fprintf(stderr, "wrote %s: %d images (%d layer heatmaps%s); open it in a browser\n", qPrintable(request.out),
               contents.images, int(contents.heatmapLayers.size()),
               contents.layersLeftOut ? qPrintable(QStringLiteral(", %1 more layers not drawn: --layer names them")
                                                       .arg(contents.layersLeftOut))
                                      : "");
  return 0;
}
