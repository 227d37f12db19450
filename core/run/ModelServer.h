#pragma once
// The engine side of a model file run out of the window's process (`hookscope-cli serve`):
// it speaks the attach protocol (docs/protocol.md) as a client, like a training script, but
// runs HookScope's own step loop on a TorchScript model, computes the statistics itself with
// core's kernels and sends them as `stats` messages. The window configures, runs, pauses and
// steps it, and can always end it by killing the process.

#include "model/Model.h"

#include <string>

namespace hookscope {

/// What the engine says of itself in its hello.
struct ServeOptions {
  std::string token;      ///< the listener's token (TCP), sent with the hello
  std::string sha256;     ///< of the model file, for the window's export
  std::string confinement;  ///< what confines the process, one line for the user ("" if nothing)
};

/// Serves `model` over the connected socket `fd` (not closed here): sends the hello, then
/// runs steps as HookScope says until it sends `stop` or hangs up. Returns how it ended; sets
/// `clean` when HookScope ended it (stop, or it closed the connection) rather than a broken
/// or refused connection.
std::string serveModel(Model& model, int fd, const ServeOptions& options, bool* clean);

} // namespace hookscope
