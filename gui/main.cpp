#include "common/Allocator.h"
#include "window/MainWindow.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QIcon>
#include <QSocketNotifier>
#include <QStandardPaths>

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <memory>

namespace {

int g_signalPipe[2] = {-1, -1};
volatile sig_atomic_t g_signalsSeen = 0;

// The first SIGINT/SIGTERM is handed to the event loop; a second ends the process at once.
void onStopSignal(int signo) {
  if (g_signalsSeen++ > 0) {
    ::signal(signo, SIG_DFL);
    ::raise(signo);
    return;
  }
  const char byte = char(signo);
  [[maybe_unused]] const auto written = ::write(g_signalPipe[1], &byte, 1);
}

// A folder of its own for this process's captures under `parent`: its time and pid, since a
// logout signals every window in the same second.
QString recoveryFolder(const QString& parent) {
  return parent + QStringLiteral("/") + QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-hhmmss")) +
         QStringLiteral("-%1").arg(QCoreApplication::applicationPid());
}

// Stops the run and saves what was captured into a recovery folder before quitting, so that
// Ctrl+C in the terminal or a session logout does not lose a run.
void handleStopSignals(MainWindow& window) {
  if (::pipe(g_signalPipe) != 0) return;
  auto* notifier = new QSocketNotifier(g_signalPipe[0], QSocketNotifier::Read, &window);
  QObject::connect(notifier, &QSocketNotifier::activated, &window, [&window, notifier] {
    char byte = 0;
    [[maybe_unused]] const auto got = ::read(g_signalPipe[0], &byte, 1);
    notifier->setEnabled(false);
    window.stop();
    const auto store = window.store();
    if (!store || window.stepsSeen() == 0 || window.reviewOnly()) {
      window.quitAfterSignal();
      return;
    }
    const QString interrupted = byte == SIGINT ? QStringLiteral("SIGINT") : QStringLiteral("SIGTERM");
    // Where, in order: the data folder, then the temporary one, should the first fail.
    const QStringList dirs = {recoveryFolder(QStandardPaths::writableLocation(QStandardPaths::GenericDataLocation) +
                                             QStringLiteral("/HookScope/recovered")),
                              recoveryFolder(QDir::tempPath() + QStringLiteral("/hookscope-recovered"))};
    auto attempt = std::make_shared<int>(0);
    QObject::connect(&window, &MainWindow::exportDone, &window, [&window, dirs, attempt, byte, interrupted](
                                                                    const QString& dir, const QString& error) {
      if (error.isEmpty()) {
        std::fprintf(stderr, "hookscope: stopped by signal %d; the captures are saved in %s\n", int(byte), qPrintable(dir));
      } else {
        std::fprintf(stderr, "hookscope: stopped by signal; saving the captures into %s failed: %s\n", qPrintable(dir),
                     qPrintable(error));
        if (++*attempt < dirs.size()) {
          QDir().mkpath(QFileInfo(dirs[*attempt]).absolutePath());
          window.exportCapturesTo(dirs[*attempt], false, interrupted);
          return;
        }
      }
      window.quitAfterSignal();  // a logout waits for no answer: the window closes, saved or not
    });
    QDir().mkpath(QFileInfo(dirs[0]).absolutePath());
    window.exportCapturesTo(dirs[0], false, interrupted);
  });
  struct sigaction action {};
  action.sa_handler = onStopSignal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
}

struct Options {
  QCommandLineOption attach{QStringLiteral("attach"),
                            QStringLiteral("Wait for a training script (or every rank of its torch.distributed job) "
                                           "instead of opening a model, as File > Attach does")};
  QCommandLineOption address{QStringLiteral("address"),
                             QStringLiteral("Where --attach waits (unix:PATH or tcp:HOST:PORT; default: HookScope's own socket)"),
                             QStringLiteral("address")};
  QCommandLineOption hook{QStringLiteral("hook"),
                          QStringLiteral("With --attach: tick Act and Grad of every module of the script whose path "
                                         "matches (a pattern as hookscope-cli record --hook takes: '*', 'blocks.*'; "
                                         "repeatable)"),
                          QStringLiteral("pattern")};
};

// Reads the command line into `parser`; --help, --version and a bad option print and exit here.
void readCommandLine(const QCoreApplication& app, QCommandLineParser& parser, const Options& options) {
  parser.setApplicationDescription(QStringLiteral("HookScope: a debugger for neural networks"));
  parser.addHelpOption();
  parser.addVersionOption();
  parser.addPositionalArgument(QStringLiteral("model"), QStringLiteral("TorchScript model file or HookScope export folder"));
  parser.addOption(options.attach);
  parser.addOption(options.address);
  parser.addOption(options.hook);
  parser.process(app);
}

void nameApplication() {
  QCoreApplication::setOrganizationName(QStringLiteral("HookScope"));
  QCoreApplication::setApplicationName(QStringLiteral("HookScope"));
  QCoreApplication::setApplicationVersion(QStringLiteral(HOOKSCOPE_VERSION));
}

} // namespace

int main(int argc, char** argv) {
  hookscope::keepFreedMemory();  // before anything allocates much: see Allocator.h
  const Options options;
  {
    // The command line is read before the window's QApplication, which needs a display:
    // --help, --version and a misspelt option answer on a terminal without one.
    QCoreApplication terminal(argc, argv);
    nameApplication();
    QCommandLineParser check;
    readCommandLine(terminal, check, options);
  }
  QApplication app(argc, argv);
  nameApplication();
  QApplication::setWindowIcon(QIcon(QStringLiteral(":/icons/hookscope.svg")));
  QCommandLineParser parser;
  readCommandLine(app, parser, options);

  MainWindow window;
  handleStopSignals(window);
  window.show();
  if (parser.isSet(options.attach) || parser.isSet(options.address)) {
    window.setAttachHooks(parser.values(options.hook));
    window.attachScript(parser.value(options.address));
    return app.exec();
  }
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
