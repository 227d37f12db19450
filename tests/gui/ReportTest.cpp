// `hookscope-cli report` end to end: a capture of the sample CNN, reported; every picture in the
// HTML is decoded and must hold plot colour, not a blank frame.
#include <QDir>
#include <QFile>
#include <QImage>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>

namespace {

struct Run {
  int code = -1;
  QString err;
};

Run cli(const QStringList& arguments) {
  QProcess process;
  process.start(QStringLiteral(HOOKSCOPE_CLI), arguments);
  process.waitForFinished(300000);
  return {process.exitStatus() == QProcess::NormalExit ? process.exitCode() : -1,
          QString::fromUtf8(process.readAllStandardError())};
}

/// Pixels of clear colour (a line, a heatmap cell), as opposed to white, black and grey.
int colouredPixels(const QImage& image) {
  int count = 0;
  for (int y = 0; y < image.height(); ++y) {
    for (int x = 0; x < image.width(); ++x) {
      const QColor c = image.pixelColor(x, y);
      if (std::max({c.red(), c.green(), c.blue()}) - std::min({c.red(), c.green(), c.blue()}) > 60) ++count;
    }
  }
  return count;
}

QList<QImage> images(const QString& html) {
  QList<QImage> out;
  static const QRegularExpression png(QStringLiteral("src=\"data:image/png;base64,([A-Za-z0-9+/=]+)\""));
  for (auto it = png.globalMatch(html); it.hasNext();) {
    out << QImage::fromData(QByteArray::fromBase64(it.next().captured(1).toLatin1()), "PNG");
  }
  return out;
}

QStringList headings(const QString& html) {
  QStringList out;
  static const QRegularExpression h3(QStringLiteral("<h3>([^<]+)"));
  for (auto it = h3.globalMatch(html); it.hasNext();) out << it.next().captured(1).trimmed();
  return out;
}

QString read(const QString& path) {
  QFile file(path);
  return file.open(QIODevice::ReadOnly) ? QString::fromUtf8(file.readAll()) : QString();
}

}  // namespace

class ReportTest : public QObject {
  Q_OBJECT

  QTemporaryDir m_tmp;
  QString m_run;

private Q_SLOTS:
  void initTestCase() {
    m_run = m_tmp.filePath(QStringLiteral("run"));
    const Run capture = cli({QStringLiteral("capture"), QStringLiteral(HOOKSCOPE_MODELS_DIR "/small_cnn.pt"),
                             QStringLiteral("--out"), m_run, QStringLiteral("--hook"), QStringLiteral("*"),
                             QStringLiteral("--steps"), QStringLiteral("6")});
    QVERIFY2(capture.code == 0, qPrintable(capture.err));
  }

  void everyPictureIsThereAndDrawn() {
    const QString out = m_tmp.filePath(QStringLiteral("report.html"));
    const Run report = cli({QStringLiteral("report"), m_run, QStringLiteral("--out"), out});
    QVERIFY2(report.code == 0, qPrintable(report.err));
    const QString html = read(out);
    // Self-contained: nothing fetched from anywhere.
    QVERIFY(!html.contains(QStringLiteral("http://")) && !html.contains(QStringLiteral("https://")));
    QVERIFY(!html.contains(QStringLiteral("<script")));
    const QStringList names = headings(html);
    // The scalars (loss first), then a heatmap per hooked layer, in the tree's order.
    QCOMPARE(names.front(), QStringLiteral("loss"));
    QVERIFY(names.contains(QStringLiteral("lr")) && names.contains(QStringLiteral("step_ms")));
    QVERIFY(names.contains(QStringLiteral("conv1")) && names.contains(QStringLiteral("fc2")));
    QVERIFY(names.indexOf(QStringLiteral("conv1")) < names.indexOf(QStringLiteral("fc2")));
    QVERIFY(html.contains(QStringLiteral("<h2>Gradient norms</h2>\n<img")));
    // Every gradient line named beside the picture, in the colour it is drawn in: the 11 modules.
    QCOMPARE(html.count(QStringLiteral("class=\"swatch\"")), 11);
    QVERIFY(!html.contains(QStringLiteral("background:#000000")));
    const auto pictures = images(html);
    QCOMPARE(pictures.size(), names.size() + 1);  // and the gradient norms, which have no <h3>
    for (int i = 0; i < pictures.size(); ++i) {
      QVERIFY2(!pictures[i].isNull() && pictures[i].width() >= 800, qPrintable(QString::number(i)));
      QVERIFY2(colouredPixels(pictures[i]) >= 50, qPrintable(QStringLiteral("picture %1 is blank").arg(i)));
    }
    QVERIFY(html.contains(QStringLiteral("small_cnn.pt")));
    QVERIFY(html.contains(QStringLiteral("No rule fired.")));
  }

  void namedLayersOnlyAndAlertsListed() {
    // NaN in one sample: alerts to list.
    const QString nanRun = m_tmp.filePath(QStringLiteral("nan-run"));
    const Run capture = cli({QStringLiteral("capture"), QStringLiteral(HOOKSCOPE_MODELS_DIR "/small_cnn.pt"),
                             QStringLiteral("--out"), nanRun, QStringLiteral("--hook"), QStringLiteral("*"),
                             QStringLiteral("--data"), QStringLiteral(HOOKSCOPE_FIXTURES_DIR "/nan_input.data.pt"),
                             QStringLiteral("--steps"), QStringLiteral("3")});
    QVERIFY2(capture.code == 0, qPrintable(capture.err));
    const QString out = m_tmp.filePath(QStringLiteral("named.html"));
    const Run report = cli({QStringLiteral("report"), nanRun, QStringLiteral("--out"), out, QStringLiteral("--layer"),
                            QStringLiteral("fc1"), QStringLiteral("--layer"), QStringLiteral("conv1")});
    QVERIFY2(report.code == 0, qPrintable(report.err));
    const QString html = read(out);
    const QStringList names = headings(html);
    QCOMPARE(names.mid(names.size() - 2), (QStringList{QStringLiteral("fc1"), QStringLiteral("conv1")}));
    QVERIFY(html.contains(QStringLiteral("<td>non_finite</td>")));
  }

  void badRequestsSayWhat() {
    const QString out = m_tmp.filePath(QStringLiteral("bad.html"));
    Run report = cli({QStringLiteral("report"), m_run, QStringLiteral("--out"), out, QStringLiteral("--layer"),
                      QStringLiteral("no.such")});
    QCOMPARE(report.code, 4);
    QVERIFY2(report.err.contains(QStringLiteral("no.such")), qPrintable(report.err));
    QVERIFY(!QFile::exists(out));
    report = cli({QStringLiteral("report"), m_tmp.filePath(QStringLiteral("nothing")), QStringLiteral("--out"), out});
    QCOMPARE(report.code, 4);
    QFile existing(out);
    QVERIFY(existing.open(QIODevice::WriteOnly) && existing.write("mine") == 4);
    existing.close();
    report = cli({QStringLiteral("report"), m_run, QStringLiteral("--out"), out});
    QCOMPARE(report.code, 5);
    QVERIFY(report.err.contains(QStringLiteral("--force")));
    QCOMPARE(read(out), QStringLiteral("mine"));
    QCOMPARE(cli({QStringLiteral("report"), m_run, QStringLiteral("--out"), out, QStringLiteral("--force")}).code, 0);
  }
};

QTEST_GUILESS_MAIN(ReportTest)
#include "ReportTest.moc"
