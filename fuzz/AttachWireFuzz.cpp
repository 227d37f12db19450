// libFuzzer target: the bytes a training script sends, after a valid hello (first input byte
// even) or from the very first byte (odd), through a socket pair into a real ScriptLink.
#include "wire/AttachListener.h"
#include "links/ScriptLink.h"
#include "wire/WireFrame.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1 || size > (1u << 16)) return 0;
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return 0;
  const int buffer = 1 << 20;  // the whole input and every answer fit: nothing blocks
  ::setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer);
  ::setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer);
  std::string bytes;
  if (data[0] % 2 == 0) {
    bytes = hookscope::wire::encodeFrame(
        hookscope::wire::kJsonFrame,
        R"({"type":"hello","protocol":2,"name":"fuzz.py","modules":[{"path":"","type":"Net","params":0},)"
        R"({"path":"fc","type":"Linear","params":12},{"path":"fc.inner","type":"ReLU","params":0}]})");
  }
  bytes.append(reinterpret_cast<const char*>(data) + 1, size - 1);
  hookscope::sendAll(fds[0], bytes);
  ::shutdown(fds[0], SHUT_WR);
  std::string error;
  auto link = hookscope::ScriptLink::accept(fds[1], "", false, std::make_shared<hookscope::CaptureStore>(),
                                                  &error, 1000);
  if (link) link->serve([](const hookscope::AttachedStep&) {});
  ::close(fds[0]);
  return 0;
}
