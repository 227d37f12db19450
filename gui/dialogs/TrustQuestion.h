#pragma once

#include <QString>

class QWidget;

/// "MODEL holds code that runs when it is opened or stepped and reaches outside HookScope:
/// <findings> Open it only if you trust where it came from." with Open anyway / Cancel
/// (Cancel the default). True when the user chose to open it.
bool askToTrust(QWidget* parent, const QString& path, const QString& findings);

/// The question's text, for a window that shows messages instead of asking (tests).
QString trustQuestionText(const QString& path, const QString& findings);
