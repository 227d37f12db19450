#pragma once

#include "CaptureStore.h"

#include <memory>
#include <string>

/// What the plots show: one store, the selected series, and the step being looked at.
struct ViewState {
  std::shared_ptr<hookscope::CaptureStore> store;
  hookscope::SeriesKey selected;  ///< module, call, kind, index of the selected series
  bool hasSelection = false;
  std::uint8_t selectedHooks = 0; ///< what is ticked on the selected layer (CaptureKind bits)
  std::int64_t step = -1;         ///< the step shown; -1 when nothing ran yet
  std::int64_t latestStep = -1;
};
