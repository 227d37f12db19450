#pragma once
// QCustomPlot's header uses Qt's keyword macros, which gui/ turns off (QT_NO_KEYWORDS, because
// they break LibTorch headers). Map them for this one include, then remove them again.
#define signals Q_SIGNALS
#define slots Q_SLOTS
#define emit Q_EMIT
#define foreach Q_FOREACH
#include <qcustomplot.h>
#undef signals
#undef slots
#undef emit
#undef foreach
