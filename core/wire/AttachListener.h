#pragma once
// Where a training script attaches: a Unix socket (mode 0600) by default, TCP with a token
// when asked. No LibTorch here.

#include <memory>
#include <string>

namespace hookscope {

/// A parsed attach address: unix:PATH, or tcp://HOST:PORT with an optional ?token=T.
struct AttachAddress {
  bool tcp = false;
  std::string path;   ///< Unix socket path
  std::string host;   ///< TCP host (127.0.0.1 unless told otherwise)
  int port = 0;       ///< 0 when listening: any free port
  std::string token;  ///< TCP only; random when the listener makes it

  /// "unix:PATH" or "tcp://HOST:PORT?token=T", the form scripts take in HOOKSCOPE_ADDRESS.
  std::string text() const;
};

/// Parses an address; false with a message that shows the two accepted forms.
bool parseAttachAddress(const std::string& text, AttachAddress* address, std::string* error);

/// The address the window and the recorder listen on unless told otherwise:
/// unix:$XDG_RUNTIME_DIR/hookscope.sock, or unix:/tmp/hookscope-UID/hookscope.sock.
std::string defaultAttachAddress();

/// A listening socket for scripts. Closing it removes the Unix socket file.
class AttachListener {
public:
  /// Listens on `address`; null with a message when the address is taken, its folder is not
  /// private, or it is not an address.
  static std::unique_ptr<AttachListener> open(const std::string& address, std::string* error);
  ~AttachListener();
  AttachListener(const AttachListener&) = delete;
  AttachListener& operator=(const AttachListener&) = delete;

  /// The full address a script uses, port and token included.
  std::string address() const { return m_address.text(); }
  const AttachAddress& parsed() const { return m_address; }
  /// Waits up to `timeoutMs` (-1: forever) for a connection; its descriptor, or -1 on a
  /// timeout or wake().
  int accept(int timeoutMs);
  /// Any thread: makes a waiting accept() return -1.
  void wake();

private:
  AttachListener() = default;
  AttachAddress m_address;
  int m_fd = -1;
  int m_wake[2] = {-1, -1};
  bool m_ownsPath = false;
};

/// Connects to a listening HookScope at `text` (what a script does); the socket's descriptor,
/// or -1 with a message. `parsed` gets the address, its token included (else HOOKSCOPE_TOKEN's).
/// Over TCP the token handshake (WireAuth.h) is done first: the descriptor is returned only
/// once the listener has proved it knows the token.
int connectAttachAddress(const std::string& text, AttachAddress* parsed, std::string* error);
/// For a Unix connection: whether the peer process runs as this user (SO_PEERCRED).
bool peerIsSameUser(int fd);

/// Writes all of `bytes` to a socket (blocking, no SIGPIPE); false when the peer is gone.
bool sendAll(int fd, const std::string& bytes);

} // namespace hookscope
