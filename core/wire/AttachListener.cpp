#include "wire/AttachListener.h"

#include "wire/WireAuth.h"
#include "wire/WireFrame.h"

#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace hookscope {

namespace {

std::string errnoText() { return std::strerror(errno); }

// The socket's folder (made 0700 when missing) must not let others replace the socket.
bool privateFolder(const std::string& socketPath, std::string* error) {
  const auto slash = socketPath.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : socketPath.substr(0, slash));
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT || ::mkdir(dir.c_str(), 0700) != 0 || ::stat(dir.c_str(), &st) != 0) {
      *error = "cannot use the folder " + dir + " for the attach socket: " + errnoText();
      return false;
    }
  }
  if (!S_ISDIR(st.st_mode)) {
    *error = dir + " is not a folder";
    return false;
  }
  // Others must not be able to replace the socket: the folder is ours (or root's) and only
  // its owner writes in it, unless it is sticky like /tmp.
  const bool ownerOk = st.st_uid == ::geteuid() || st.st_uid == 0;
  const bool othersWrite = (st.st_mode & 0022) != 0 && !(st.st_mode & S_ISVTX);
  if (!ownerOk || othersWrite) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%03o", unsigned(st.st_mode & 0777));
    *error = "the folder " + dir + " of the attach socket is not private to this user (owner uid " +
             std::to_string(st.st_uid) + ", mode " + mode + "): choose another with --address unix:PATH";
    return false;
  }
  return true;
}

int makeWakePipe(int fds[2]) { return ::pipe2(fds, O_CLOEXEC | O_NONBLOCK); }

} // namespace

std::string AttachAddress::text() const {
  if (!tcp) return "unix:" + path;
  std::string out = "tcp://" + host + ":" + std::to_string(port);
  if (!token.empty()) out += "?token=" + token;
  return out;
}

bool parseAttachAddress(const std::string& text, AttachAddress* address, std::string* error) {
  AttachAddress out;
  const std::string usage = "write unix:PATH or tcp://HOST:PORT (e.g. tcp://127.0.0.1:7340)";
  if (text.rfind("unix:", 0) == 0) {
    out.path = text.substr(5);
    if (out.path.rfind("//", 0) == 0) out.path = out.path.substr(2);
    if (out.path.empty()) {
      *error = "address '" + text + "' names no socket path: " + usage;
      return false;
    }
    if (out.path.size() >= sizeof(sockaddr_un{}.sun_path)) {
      *error = "socket path '" + out.path + "' is too long for a Unix socket (at most " +
               std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) + " bytes)";
      return false;
    }
  } else if (text.rfind("tcp://", 0) == 0) {
    out.tcp = true;
    std::string rest = text.substr(6);
    const auto query = rest.find('?');
    if (query != std::string::npos) {
      const std::string q = rest.substr(query + 1);
      rest = rest.substr(0, query);
      if (q.rfind("token=", 0) == 0) out.token = q.substr(6);
    }
    const auto colon = rest.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      *error = "address '" + text + "' has no host and port: " + usage;
      return false;
    }
    out.host = rest.substr(0, colon);
    const std::string port = rest.substr(colon + 1);
    char* end = nullptr;
    const long value = std::strtol(port.c_str(), &end, 10);
    if (port.empty() || *end != '\0' || value < 0 || value > 65535) {
      *error = "address '" + text + "' has a bad port '" + port + "': " + usage;
      return false;
    }
    out.port = int(value);
  } else {
    *error = "address '" + text + "': " + usage;
    return false;
  }
  *address = out;
  return true;
}

std::string defaultAttachAddress() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  struct stat st {};
  if (runtime && *runtime && ::stat(runtime, &st) == 0 && S_ISDIR(st.st_mode)) {
    return "unix:" + std::string(runtime) + "/hookscope.sock";
  }
  return "unix:/tmp/hookscope-" + std::to_string(::getuid()) + "/hookscope.sock";
}

std::unique_ptr<AttachListener> AttachListener::open(const std::string& text, std::string* error) {
  AttachAddress address;
  if (!parseAttachAddress(text, &address, error)) return nullptr;
  std::unique_ptr<AttachListener> listener(new AttachListener());
  if (makeWakePipe(listener->m_wake) != 0) {
    *error = "cannot make a pipe: " + errnoText();
    return nullptr;
  }
  if (!address.tcp) {
    if (!privateFolder(address.path, error)) return nullptr;
    sockaddr_un sa {};
    sa.sun_family = AF_UNIX;
    std::strncpy(sa.sun_path, address.path.c_str(), sizeof sa.sun_path - 1);
    struct stat st {};
    if (::lstat(address.path.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode)) {
        *error = address.path + " exists and is not a socket: remove it or choose another --address";
        return nullptr;
      }
      // A socket file: in use by a live HookScope, or left behind by one that died.
      const int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      const bool live = probe >= 0 && ::connect(probe, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
      if (probe >= 0) ::close(probe);
      if (live) {
        *error = "another HookScope already listens at " + address.text() +
                 ": close it, or listen elsewhere with --address unix:PATH";
        return nullptr;
      }
      ::unlink(address.path.c_str());
    }
    listener->m_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener->m_fd < 0 || ::bind(listener->m_fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      *error = "cannot listen at " + address.text() + ": " + errnoText();
      return nullptr;
    }
    listener->m_ownsPath = true;
    if (::chmod(address.path.c_str(), 0600) != 0) {
      *error = "cannot make " + address.path + " private: " + errnoText();
      return nullptr;
    }
  } else {
    if (address.host.empty()) address.host = "127.0.0.1";
    if (address.token.empty()) address.token = wire::randomHex(16);
    addrinfo hints {};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    if (const int rc = ::getaddrinfo(address.host.c_str(), std::to_string(address.port).c_str(), &hints, &found); rc != 0) {
      *error = "cannot listen at " + address.host + ": " + ::gai_strerror(rc);
      return nullptr;
    }
    listener->m_fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    if (listener->m_fd >= 0) ::setsockopt(listener->m_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    const bool bound = listener->m_fd >= 0 && ::bind(listener->m_fd, found->ai_addr, found->ai_addrlen) == 0;
    ::freeaddrinfo(found);
    if (!bound) {
      *error = "cannot listen at tcp://" + address.host + ":" + std::to_string(address.port) + ": " + errnoText();
      return nullptr;
    }
    sockaddr_storage bound_to {};
    socklen_t length = sizeof bound_to;
    ::getsockname(listener->m_fd, reinterpret_cast<sockaddr*>(&bound_to), &length);
    address.port = bound_to.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound_to)->sin6_port)
                                                  : ntohs(reinterpret_cast<sockaddr_in*>(&bound_to)->sin_port);
  }
  if (::listen(listener->m_fd, SOMAXCONN) != 0) {
    *error = "cannot listen at " + address.text() + ": " + errnoText();
    return nullptr;
  }
  listener->m_address = address;
  return listener;
}

AttachListener::~AttachListener() {
  if (m_fd >= 0) ::close(m_fd);
  if (m_ownsPath) ::unlink(m_address.path.c_str());
  for (int fd : m_wake) {
    if (fd >= 0) ::close(fd);
  }
}

int AttachListener::accept(int timeoutMs) {
  pollfd fds[2] = {{m_fd, POLLIN, 0}, {m_wake[0], POLLIN, 0}};
  const int ready = ::poll(fds, 2, timeoutMs);
  if (ready <= 0) return -1;
  if (fds[1].revents) {
    char drain[64];
    while (::read(m_wake[0], drain, sizeof drain) > 0) {
    }
    return -1;
  }
  return ::accept4(m_fd, nullptr, nullptr, SOCK_CLOEXEC);
}

void AttachListener::wake() {
  const char byte = 1;
  (void)!::write(m_wake[1], &byte, 1);
}

namespace {

// One JSON message from `fd` before `deadline`; false with what went wrong.
bool readMessage(int fd, wire::FrameReader& reader, std::chrono::steady_clock::time_point deadline,
                 nlohmann::json* message, std::string* error) {
  wire::Frame frame;
  const auto outcome = wire::waitForFrame(fd, reader, deadline, &frame, [fd](char* buffer, std::size_t size) {
    return long(::recv(fd, buffer, size, 0));
  });
  if (outcome != wire::FrameWait::Complete) {
    *error = outcome == wire::FrameWait::Bad        ? reader.error()
             : outcome == wire::FrameWait::TimedOut ? std::string("no answer within 10 s")
                                                    : std::string("the listener closed the connection");
    return false;
  }
  *message = nlohmann::json::parse(frame.payload, nullptr, false);
  if (frame.type != wire::kJsonFrame || !message->is_object()) {
    *error = "the listener sent something other than a JSON message";
    return false;
  }
  return true;
}

// The script's side of the token handshake (WireAuth.h): answers the listener's challenge and
// checks its proof, before the caller sends anything else.
bool proveToken(int fd, const AttachAddress& address, std::string* error) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  wire::FrameReader reader;
  nlohmann::json challenge, proof;
  const auto refusal = [&](const nlohmann::json& message) {
    const auto text = message.find("message");
    *error = "HookScope at " + address.text() + " refused: " +
             (text != message.end() && text->is_string() ? text->get<std::string>() : std::string("no reason given"));
    return false;
  };
  if (!readMessage(fd, reader, deadline, &challenge, error)) {
    *error = "HookScope at " + address.text() + " sent no token challenge (" + *error +
             "): an older HookScope, or not HookScope";
    return false;
  }
  if (challenge.value("type", "") == "error") return refusal(challenge);
  const auto nonce = challenge.find("nonce");
  if (challenge.value("type", "") != "challenge" || nonce == challenge.end() || !nonce->is_string() ||
      nonce->get<std::string>().size() < 16 || nonce->get<std::string>().size() > 128) {
    *error = "the listener at " + address.text() + " sent no token challenge: an older HookScope, or not HookScope";
    return false;
  }
  if (address.token.empty()) {
    *error = "HookScope at " + address.text() + " asks for its token: give the full address it printed "
             "(tcp://HOST:PORT?token=...) or set HOOKSCOPE_TOKEN";
    return false;
  }
  const std::string theirs = nonce->get<std::string>(), ours = wire::randomHex(16);
  const nlohmann::json answer = {{"type", "answer"}, {"nonce", ours}, {"mac", wire::scriptProof(address.token, theirs, ours)}};
  if (!sendAll(fd, wire::encodeFrame(wire::kJsonFrame, answer.dump()))) {
    *error = "the listener at " + address.text() + " closed the connection";
    return false;
  }
  if (!readMessage(fd, reader, deadline, &proof, error)) {
    *error = "HookScope at " + address.text() + " did not answer the token (" + *error + ")";
    return false;
  }
  if (proof.value("type", "") == "error") return refusal(proof);
  const auto mac = proof.find("mac");
  if (proof.value("type", "") != "proof" || mac == proof.end() || !mac->is_string() ||
      !wire::constantTimeEqual(mac->get<std::string>(), wire::listenerProof(address.token, theirs, ours))) {
    *error = "the listener at " + address.text() + " did not prove it knows the token: it is not the HookScope "
             "that printed this address, so nothing was sent to it";
    return false;
  }
  return true;
}

} // namespace

int connectAttachAddress(const std::string& text, AttachAddress* parsed, std::string* error) {
  if (!parseAttachAddress(text, parsed, error)) return -1;
  const AttachAddress& address = *parsed;
  int fd = -1;
  if (!address.tcp) {
    sockaddr_un sa {};
    sa.sun_family = AF_UNIX;
    std::strncpy(sa.sun_path, address.path.c_str(), sizeof sa.sun_path - 1);
    fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) return fd;
  } else {
    addrinfo hints {};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const std::string host = address.host.empty() ? "127.0.0.1" : address.host;
    if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(address.port).c_str(), &hints, &found); rc != 0) {
      *error = "cannot reach " + host + ": " + ::gai_strerror(rc);
      return -1;
    }
    fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const bool connected = fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0;
    ::freeaddrinfo(found);
    if (connected) {
      if (parsed->token.empty()) {
        if (const char* token = std::getenv("HOOKSCOPE_TOKEN")) parsed->token = token;
      }
      if (proveToken(fd, *parsed, error)) return fd;
      ::close(fd);
      return -1;
    }
  }
  *error = "nothing listens at " + address.text() + " (" + errnoText() +
           "): start the HookScope window (File > Attach) or hookscope-cli record there first";
  if (fd >= 0) ::close(fd);
  return -1;
}

bool peerIsSameUser(int fd) {
  ucred cred {};
  socklen_t length = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &length) != 0) return false;
  return cred.uid == ::geteuid();
}

bool sendAll(int fd, const std::string& bytes) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += std::size_t(n);
  }
  return true;
}

} // namespace hookscope
