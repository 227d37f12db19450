#include "links/PeerSocket.h"

#include "wire/AttachListener.h"
#include "wire/WireJson.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace hookscope {

std::unique_ptr<PeerSocket> PeerSocket::adopt(int fd, std::string* error) {
  std::unique_ptr<PeerSocket> socket(new PeerSocket(fd));
  if (::pipe2(socket->m_wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    *error = std::string("cannot make a pipe: ") + std::strerror(errno);
    return nullptr;
  }
  return socket;
}

PeerSocket::~PeerSocket() {
  if (m_fd >= 0) ::close(m_fd);
  for (int fd : m_wake) {
    if (fd >= 0) ::close(fd);
  }
}

bool PeerSocket::sameUser() const { return peerIsSameUser(m_fd); }

bool PeerSocket::send(const std::string& jsonText) {
  std::lock_guard<std::mutex> lock(m_sendMutex);
  return sendAll(m_fd, wire::encodeFrame(wire::kJsonFrame, jsonText));
}

void PeerSocket::sendError(const std::string& message, std::uint8_t version) {
  // In an older peer's version when it spoke one, so that it can read why it was refused.
  const std::string text = wireText(nlohmann::json{{"type", "error"}, {"message", message}});
  std::lock_guard<std::mutex> lock(m_sendMutex);
  sendAll(m_fd, wire::encodeFrame(wire::kJsonFrame, text,
                                  version && version < wire::kProtocolVersion ? version : wire::kProtocolVersion));
}

ssize_t PeerSocket::receiveWithDescriptors(char* buffer, std::size_t size) {
  iovec io{buffer, size};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
  msghdr msg{};
  msg.msg_iov = &io;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(m_fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  // A protocol 1 script's shared memory came this way: not used any more.
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int received;
        std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        ::close(received);
      }
    }
  }
  return n;
}

bool PeerSocket::readFirst(int timeoutMs, wire::Frame* frame, std::vector<wire::Frame>* rest,
                           std::uint8_t* peerVersion, bool* closed, std::string* error, std::uint32_t limit) {
  wire::FrameReader reader;
  reader.setLimit(limit);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  *closed = false;
  switch (wire::waitForFrame(m_fd, reader, deadline, frame, [this](char* buffer, std::size_t size) {
            return long(receiveWithDescriptors(buffer, size));
          })) {
    case wire::FrameWait::Complete:
      break;
    case wire::FrameWait::Bad:
      *peerVersion = reader.peerVersion();
      *error = reader.error();
      return false;
    case wire::FrameWait::TimedOut:
      *error = "no hello within " + std::to_string(timeoutMs / 1000) + " s: not a HookScope script";
      return false;
    case wire::FrameWait::Closed:
      *closed = true;
      *error = "the peer closed the connection before its hello";
      return false;
  }
  wire::Frame next;
  while (reader.next(&next)) rest->push_back(std::move(next));
  return true;
}

PeerSocket::Wait PeerSocket::wait() {
  while (true) {
    pollfd fds[2] = {{m_fd, POLLIN, 0}, {m_wake[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return Wait::Failed;
    }
    return fds[1].revents ? Wait::Woken : Wait::Readable;
  }
}

ssize_t PeerSocket::receive(char* buffer, std::size_t size) { return receiveWithDescriptors(buffer, size); }

void PeerSocket::wake() {
  const char byte = 1;
  (void)!::write(m_wake[1], &byte, 1);
}

void PeerSocket::hangUp() { ::shutdown(m_fd, SHUT_RDWR); }

} // namespace hookscope
