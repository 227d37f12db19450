#pragma once
// A self-contained HTML report of an export folder, with the pictures the window would show,
// drawn by the window's own plot pages offscreen: what `hookscope-cli report` writes, so that a
// headless run on a server or in CI can be judged by eye in a browser.

#include <QString>
#include <QStringList>

#include <cstddef>
#include <functional>
#include <limits>
#include <optional>
#include <string>

struct ReportRequest {
  QString run;           ///< export folder
  QString out;           ///< the .html file to write
  QStringList layers;    ///< modules to draw a heatmap of; empty: every hooked one, up to maxLayers
  int maxLayers = 16;
  bool force = false;    ///< replace an existing file
  QString compare;       ///< a second export: drawn over the first, and where they first diverge
  std::size_t capBytes = std::numeric_limits<std::size_t>::max();  ///< what each export read may take in memory
  std::function<void(const QString&)> onStage;  ///< told what is done now ("reading RUN"), for a progress line
};

/// What writeReport drew, for the message and the tests.
struct ReportContents {
  int images = 0;
  QStringList heatmapLayers;  ///< in the order drawn
  int layersLeftOut = 0;      ///< hooked layers past maxLayers, not drawn
  int precisionRows = 0;      ///< tensors listed as losing values in float16 or fp8
  QString firstDivergence;    ///< with a compared run: "step 1, activation conv1 (...)", or "" for none
  std::optional<std::string> firstMover;  ///< the module where the loss's spike started (or one left its band alone)
  QStringList thinnedReads;   ///< an export read at every k-th step (over capBytes whole), as thinnedReadText says it
};

enum class ReportResult {
  Written,
  BadInput,    ///< the export cannot be read, or lacks a layer asked for
  CannotWrite  ///< the file exists (without force) or cannot be written
};

/// Writes the report (a temporary file moved into place); otherwise a message that says what to
/// do. Needs a QApplication (offscreen will do).
ReportResult writeReport(const ReportRequest& request, ReportContents* contents, QString* error);
