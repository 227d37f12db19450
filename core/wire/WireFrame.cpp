#include "wire/WireFrame.h"

#include <poll.h>

#include <cstring>
#include <vector>

namespace hookscope::wire {

namespace {

void putU32(char* out, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) out[i] = char((value >> (8 * i)) & 0xff);
}

std::uint32_t getU32(const char* in) {
  std::uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value |= std::uint32_t(std::uint8_t(in[i])) << (8 * i);
  return value;
}

} // namespace

std::string encodeFrame(std::uint8_t type, const std::string& payload, std::uint8_t version) {
  std::string out(kHeaderBytes, '\0');
  out[0] = 'H';
  out[1] = 'S';
  out[2] = char(version);
  out[3] = char(type);
  putU32(&out[4], std::uint32_t(payload.size()));
  out += payload;
  return out;
}

std::string versionAdvice(int theirs) {
  const std::string versions = "the script speaks protocol version " + std::to_string(theirs) + ", HookScope " +
                               std::to_string(kProtocolVersion) + ": ";
  if (theirs < kProtocolVersion) {
    return versions + "upgrade the script's hookscope package to this HookScope's release (pip install the python/ "
                      "folder of this HookScope, or put it first on PYTHONPATH)";
  }
  return versions + "upgrade HookScope (the window or hookscope-cli) to the release of the script's hookscope package";
}

void FrameReader::feed(const char* data, std::size_t size) {
  if (!m_error.empty()) return;
  if (m_start > 0 && m_start == m_buffer.size()) {
    m_buffer.clear();
    m_start = 0;
  }
  m_buffer.append(data, size);
}

bool FrameReader::next(Frame* frame) {
  if (!m_error.empty() || pending() < kHeaderBytes) return false;
  const char* header = m_buffer.data() + m_start;
  if (header[0] != 'H' || header[1] != 'S') {
    m_error = "the peer does not speak the HookScope protocol (bad frame header)";
    return false;
  }
  if (std::uint8_t(header[2]) != kProtocolVersion) {
    m_peerVersion = std::uint8_t(header[2]);
    m_error = versionAdvice(m_peerVersion);
    return false;
  }
  const std::uint8_t type = std::uint8_t(header[3]);
  const std::uint32_t length = getU32(header + 4);
  if (type != kJsonFrame && type != kStatsFrame) {
    m_error = "unknown frame type " + std::to_string(type) + " (protocol 2 carries JSON messages and stats rows)";
    return false;
  }
  if (length > m_limit) {
    m_error = "a message of " + std::to_string(length) + " bytes is over the limit of " + std::to_string(m_limit);
    return false;
  }
  if (pending() < kHeaderBytes + length) return false;
  frame->type = type;
  frame->payload.assign(header + kHeaderBytes, length);
  m_start += kHeaderBytes + length;
  if (m_start > (1u << 20) && m_start * 2 > m_buffer.size()) {  // drop what was read now and then
    m_buffer.erase(0, m_start);
    m_start = 0;
  }
  return true;
}

FrameWait waitForFrame(int fd, FrameReader& reader, std::chrono::steady_clock::time_point deadline, Frame* frame,
                       const std::function<long(char* buffer, std::size_t size)>& receive) {
  std::vector<char> buffer(1 << 16);
  while (!reader.next(frame)) {
    if (!reader.error().empty()) return FrameWait::Bad;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, int(left.count())) <= 0) return FrameWait::TimedOut;
    const long n = receive(buffer.data(), buffer.size());
    if (n <= 0) return FrameWait::Closed;
    reader.feed(buffer.data(), std::size_t(n));
  }
  return FrameWait::Complete;
}

} // namespace hookscope::wire
