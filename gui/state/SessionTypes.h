#pragma once
// Plain value types that cross from the session thread to the window's.

#include "common/ModelTypes.h"
#include "common/RunConfig.h"
#include "common/StepResult.h"
#include "files/ExportManifest.h"
#include "rules/RuleEvaluator.h"
#include "store/CaptureStore.h"

#include <QMetaType>
#include <QString>

#include <memory>
#include <optional>
#include <vector>

/// What the window needs of something freshly opened: a model file, an attached script or job,
/// a reopened export or checkpoint.
struct SessionSummary {
  QString path;
  QString fileName;
  QString exampleInput;                  ///< input spec stored in the model file, or ""
  std::vector<hookscope::ModuleInfo> modules;
  std::shared_ptr<hookscope::CaptureStore> store;
  bool reviewOnly = false;               ///< an export opened without its model
  std::vector<std::uint8_t> hooks;       ///< per-module hook masks (review: what was hooked)
  bool attached = false;                 ///< a training script attached over the wire
  QString confinement;                   ///< a model file: what confines its engine process ("" if nothing)
  QString script;                        ///< for an attached script: "train.py (pid 42 on host, PyTorch 2.13.0, cpu)"
  int worldSize = 1;                     ///< attached: ranks of its torch.distributed job (1: a lone script)
  QString job;                           ///< attached: its job ("host:port" or the name it gave)
  /// For a reopened export: its alerts and its interventions, with their steps.
  std::vector<hookscope::Alert> alerts;
  std::vector<hookscope::InterventionRecord> interventions;
  /// For a reopened export that kept the model: each module's output shapes (call 0).
  std::vector<hookscope::ModuleCallShape> shapes;
  /// What the window says once about what was opened ("an export written before ...").
  QString note;
  /// For a reopened export: the configuration its run had and its steps (a model file's run),
  /// or why the Run tab shows none (a script's own loop; a checkpoint, where nothing ran).
  std::optional<hookscope::RunConfig> recordedConfig;
  std::int64_t recordedSteps = 0;
  QString recordedNote;
};

/// One finished step, as the window shows it.
struct StepSummary {
  hookscope::StepResult result;
  int rank = 0;                                    ///< the rank of a job that ended this step
  /// The newest step whose captures are all in: this one, or in a job the newest step every
  /// live rank has ended (-1: none yet).
  std::int64_t finishedStep = -1;
  std::vector<hookscope::ModuleCallShape> shapes;  ///< filled on the first step after opening
  std::vector<hookscope::Alert> alerts;            ///< rules that fired on this step
  std::optional<hookscope::Alert> breakAlert;      ///< the armed rule that paused the run here
};

Q_DECLARE_METATYPE(SessionSummary)
Q_DECLARE_METATYPE(StepSummary)
Q_DECLARE_METATYPE(hookscope::RunConfig)
