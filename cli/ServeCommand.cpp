// hookscope-cli serve: runs a model file for a HookScope window, in a process of its own.
#include "cli/CliCommands.h"
#include "cli/CliSupport.h"

#include "wire/AttachListener.h"
#include "engine/Confinement.h"
#include "sessions/EngineProcess.h"
#include "engine/Model.h"
#include "engine/ModelArchiveScan.h"
#include "engine/ModelServer.h"
#include "files/Sha256.h"

#include <poll.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

namespace hookscope::cli {

int runServe(const ServeOptions& options, const std::vector<std::string>& libraries) {
  std::string message;
  std::string text = options.address;
  if (text.empty()) {
    const char* env = std::getenv("HOOKSCOPE_ADDRESS");
    text = env && *env ? env : defaultAttachAddress();
  }
  AttachAddress address;
  const int fd = connectAttachAddress(text, &address, &message);
  if (fd < 0) return error(kUsage, message);
  if (address.tcp && address.token.empty()) {
    const char* token = std::getenv("HOOKSCOPE_TOKEN");
    if (token) address.token = token;
  }
  // From here on, nothing in the model file can write a file, start a program or reach the
  // network; the connection above stays.
  hookscope::ServeOptions serve;
  serve.token = address.token;
  if (options.confine) {
    Confinement done;
    if (!confineProcess(&done, &message)) {
      return error(kModelLoad, message + "; run with --no-confine only for a model you trust");
    }
    serve.confinement = done.describe();
  }
  // The window goes away (closed, killed): so does the engine, even inside a step that never ends.
  std::thread([fd] {
    pollfd p{fd, POLLRDHUP, 0};
    while (::poll(&p, 1, -1) < 0) {
    }
    ::_exit(0);
  }).detach();

  if (!loadLibraries(libraries)) return kModelLoad;
  std::vector<ArchiveFinding> findings;
  if (!options.trust && std::filesystem::is_regular_file(options.model) &&
      scanModelArchive(options.model, &findings, &message) && !findings.empty()) {
    static_assert(kNeedsTrust == kEngineNeedsTrust, "the window reads serve's exit code for a trust question");
    return refuseUntrusted(options.model, describeFindings(findings));
  }
  auto model = Model::load(options.model, &message);
  if (!model) return error(kModelLoad, confinedRefusal(message, options.confine));
  serve.sha256 = sha256File(options.model);
  bool clean = false;
  const std::string ended = serveModel(*model, fd, serve, &clean);
  if (!clean) return error(kData, ended);
  ::close(fd);
  return kOk;
}

} // namespace hookscope::cli
