#pragma once
// The hookscope-cli the window runs for what it does not do itself (an engine process for a
// model file, a checkpoint's statistics, a TensorBoard log, a comparison), and what it says.

#include <QByteArray>
#include <QString>

/// The hookscope-cli the window runs: HOOKSCOPE_CLI (HOOKSCOPE_ENGINE before, with a warning),
/// else beside this program (installed), else in the build tree's cli/ folder.
QString cliProgram();
/// What hookscope-cli said went wrong, from its standard error: the text after its last
/// "hookscope-cli: " (findings that follow on further lines included), or all of it.
QString cliMessage(const QByteArray& standardError);
