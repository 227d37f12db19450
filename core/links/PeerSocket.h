#pragma once
// The connection to one attached process: the socket and a pipe that wakes its reader, frames
// out (from any thread, one at a time), bytes in (descriptors that come with them are closed).

#include "wire/WireFrame.h"

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace hookscope {

class PeerSocket {
public:
  /// Takes over `fd`; null with a message when the wake pipe cannot be made.
  static std::unique_ptr<PeerSocket> adopt(int fd, std::string* error);
  ~PeerSocket();
  PeerSocket(const PeerSocket&) = delete;
  PeerSocket& operator=(const PeerSocket&) = delete;

  int fd() const { return m_fd; }
  /// Whether the peer runs as this user (a Unix socket's credentials).
  bool sameUser() const;
  /// Sends one JSON message as a frame; false when the peer is gone. Any thread.
  bool send(const std::string& jsonText);
  /// Sends an `error` message, in the peer's frame version when it spoke an older one.
  void sendError(const std::string& message, std::uint8_t version = wire::kProtocolVersion);
  /// Reads the first frame within `timeoutMs`, and any that came with it (into `rest`). False
  /// with a message (`closed` set when the peer hung up first); `peerVersion` is the frame
  /// version the peer spoke, for the answer. A message over `limit` bytes fails at its header.
  bool readFirst(int timeoutMs, wire::Frame* frame, std::vector<wire::Frame>* rest, std::uint8_t* peerVersion,
                 bool* closed, std::string* error, std::uint32_t limit = wire::kMaxJsonBytes);

  enum class Wait { Readable, Woken, Failed };
  /// Blocks until bytes come or wake() is called.
  Wait wait();
  /// Reads what came (0: the peer closed; < 0: errno says why).
  ssize_t receive(char* buffer, std::size_t size);
  /// Any thread: makes wait() return Woken.
  void wake();
  /// Shuts the socket both ways: the peer sees it close.
  void hangUp();

private:
  explicit PeerSocket(int fd) : m_fd(fd) {}
  /// recvmsg, keeping descriptors that come with the bytes (then closed).
  ssize_t receiveWithDescriptors(char* buffer, std::size_t size);

  int m_fd = -1;
  int m_wake[2] = {-1, -1};
  std::mutex m_sendMutex;
};

} // namespace hookscope
