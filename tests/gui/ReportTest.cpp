// `hookscope-cli report` end to end: a capture of the sample CNN, reported; every picture in the
// HTML is decoded and must hold plot colour, not a blank frame.
#include "files/ExportFolder.h"
#include "store/CaptureStore.h"

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

/// An export of layers "a" and "b" over three steps, with these counts per 1000 values of a's
/// activation and b's gradient at each step (-1: not measured).
QString writeCounted(const QString& dir, std::int64_t aE4m3, std::int64_t bF16) {
  using namespace hookscope;
  CaptureStore store;
  for (int step = 0; step < 3; ++step) {
    TensorStats s;
    s.shape = {1000};
    s.dtype = "float32";
    s.numel = 1000;
    s.histLow = -1;
    s.histHigh = 1;
    s.histogram = std::vector<std::int64_t>(4, 250);
    s.amax = 1;
    s.f16Overflow = s.f16Underflow = s.e4m3Underflow = s.e5m2Underflow = aE4m3 < 0 ? -1 : 0;
    TensorStats a = s, b = s;
    if (aE4m3 > 0) a.e4m3Underflow = aE4m3 * step;  // the worst at the last step
    if (bF16 > 0) b.f16Overflow = step == 1 ? bF16 : 0;  // at step 1 only
    store.add(step, {"a", 0, CaptureKind::Activation, 0}, a);
    store.add(step, {"b", 0, CaptureKind::Gradient, 0}, b);
    store.addScalar(step, "loss", 1.0 / (step + 1));
  }
  ExportManifest m;
  m.modelFile = "model.pt";
  m.modelSha256 = "abc";
  m.hookscopeVersion = "test";
  m.config.inputSpecs = {"8x4"};
  m.steps = 3;
  m.hooked = {{"a", {"activation"}}, {"b", {"gradient"}}};
  std::string error;
  if (!writeExport(dir.toStdString(), m, store, {}, {}, &error)) qWarning("%s", error.c_str());
  return dir;
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
    // Six steps are too few for a band: said, and nothing drawn for it (issue 49).
    QVERIFY2(html.contains(QStringLiteral("<h2>Where the loss spiked</h2>\n<p>the loss has 6 steps; a band needs 9 "
                                          "before the step it judges</p>")),
             qPrintable(html.mid(html.indexOf(QStringLiteral("Where the loss")), 300)));
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

  void theLowPrecisionSectionListsEachTensorsWorstShare() {
    const QString out = m_tmp.filePath(QStringLiteral("precision.html"));
    const QString run = writeCounted(m_tmp.filePath(QStringLiteral("counted")), 25, 3);
    QVERIFY2(cli({QStringLiteral("report"), run, QStringLiteral("--out"), out}).code == 0, qPrintable(run));
    QString html = read(out);
    // a: 2.5% flushed at step 1, 5% at step 2; b: 3 of 1000 past 65504 at step 1. Worst first.
    const QString a = QStringLiteral("<tr><td>a</td><td>activation</td><td>0</td><td>0</td>"
                                     "<td>5% <small>at step 2</small></td><td>0</td></tr>");
    const QString b = QStringLiteral("<tr><td>b</td><td>gradient</td><td>0.3% <small>at step 1</small></td>"
                                     "<td>0</td><td>0</td><td>0</td></tr>");
    QVERIFY2(html.contains(a) && html.contains(b) && html.indexOf(a) < html.indexOf(b), qPrintable(html));
    // The worst tensor drawn over steps, under its name.
    QVERIFY(html.contains(QStringLiteral("<h3>a <small>activation, call 0, tensor 0: the most lost</small></h3>\n<img")));
    // Nothing lost, and nothing counted, each say so.
    const QString clean = writeCounted(m_tmp.filePath(QStringLiteral("clean")), 0, 0);
    QVERIFY(cli({QStringLiteral("report"), clean, QStringLiteral("--out"), out, QStringLiteral("--force")}).code == 0);
    html = read(out);
    QVERIFY2(html.contains(QStringLiteral("None of the 2 captured tensors")), qPrintable(html));
    const QString old = writeCounted(m_tmp.filePath(QStringLiteral("uncounted")), -1, 0);
    QVERIFY(cli({QStringLiteral("report"), old, QStringLiteral("--out"), out, QStringLiteral("--force")}).code == 0);
    QVERIFY(read(out).contains(QStringLiteral("Not counted in this export")));
  }

  // Issue 37, item 4: report --compare draws both runs and says where they first diverge.
  void aComparedRunIsDrawnWithItsFirstDivergence() {
    const QString fast = m_tmp.filePath(QStringLiteral("fast"));
    const Run capture = cli({QStringLiteral("capture"), QStringLiteral(HOOKSCOPE_MODELS_DIR "/small_cnn.pt"),
                             QStringLiteral("--out"), fast, QStringLiteral("--hook"), QStringLiteral("*"),
                             QStringLiteral("--steps"), QStringLiteral("6"), QStringLiteral("--lr"), QStringLiteral("0.03")});
    QVERIFY2(capture.code == 0, qPrintable(capture.err));
    const QString out = m_tmp.filePath(QStringLiteral("compared.html"));
    const Run report = cli({QStringLiteral("report"), m_run, QStringLiteral("--out"), out, QStringLiteral("--compare"), fast});
    QVERIFY2(report.code == 0, qPrintable(report.err));
    const QString html = read(out);
    QVERIFY2(html.contains(QStringLiteral("<h2>Compared with fast</h2>")), qPrintable(html.left(2000)));
    QVERIFY2(html.contains(QStringLiteral("First divergence: step 1, activation conv1 (")), qPrintable(html.left(4000)));
    const QString alone = m_tmp.filePath(QStringLiteral("alone.html"));
    QCOMPARE(cli({QStringLiteral("report"), m_run, QStringLiteral("--out"), alone}).code, 0);
    // The loss picture holds the dashed compared line: it differs from the report without it.
    QVERIFY(images(html).size() == images(read(alone)).size());
    QVERIFY(images(html).front() != images(read(alone)).front());
    const Run bad = cli({QStringLiteral("report"), m_run, QStringLiteral("--out"), m_tmp.filePath(QStringLiteral("x.html")),
                         QStringLiteral("--compare"), m_tmp.filePath(QStringLiteral("nothing"))});
    QCOMPARE(bad.code, 4);
    QVERIFY2(bad.err.contains(QStringLiteral("--compare")), qPrintable(bad.err));
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
