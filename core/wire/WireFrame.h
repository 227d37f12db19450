#pragma once
// Framing of the attach protocol (docs/protocol.md): an 8-byte header, then a JSON message.
// No LibTorch here: the fuzzer drives it alone.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace hookscope::wire {

/// Version 2: scripts send statistics they computed (`stats`); version 1 sent tensor bytes.
constexpr std::uint8_t kProtocolVersion = 2;
constexpr std::uint8_t kJsonFrame = 1;
/// A step's statistics as rows of float64 (docs/protocol.md, binary stats), once the welcome
/// said HookScope reads them; their series are declared once in a JSON `series` message.
constexpr std::uint8_t kStatsFrame = 2;
constexpr std::size_t kHeaderBytes = 8;
/// The largest JSON message either side accepts (a hello of a 100,000-module model fits).
constexpr std::uint32_t kMaxJsonBytes = 16u << 20;

/// A header and payload as bytes, in this protocol's version or (to answer an older peer in
/// words it can read) another.
std::string encodeFrame(std::uint8_t type, const std::string& payload, std::uint8_t version = kProtocolVersion);

/// What to upgrade when a peer speaks protocol `theirs` and HookScope kProtocolVersion.
std::string versionAdvice(int theirs);

struct Frame {
  std::uint8_t type = 0;
  std::string payload;
};

/// Cuts a byte stream into frames. A bad magic, another protocol version, an unknown type or
/// a length over the limits makes the reader fail for good, with a message for both sides.
class FrameReader {
public:
  /// Appends received bytes.
  void feed(const char* data, std::size_t size);
  /// The next complete frame; false when none is complete yet or the stream is bad (see error()).
  bool next(Frame* frame);
  /// "" while the stream is good.
  const std::string& error() const { return m_error; }
  /// Bytes received but not yet returned as frames.
  std::size_t pending() const { return m_buffer.size() - m_start; }
  /// The protocol version a peer of another version spoke (0 while none was seen).
  std::uint8_t peerVersion() const { return m_peerVersion; }
  /// The largest message taken from here on (kMaxJsonBytes unless lowered): a longer one's
  /// header fails the reader before its body is waited for.
  void setLimit(std::uint32_t bytes) { m_limit = bytes; }

private:
  std::string m_buffer;
  std::size_t m_start = 0;
  std::string m_error;
  std::uint8_t m_peerVersion = 0;
  std::uint32_t m_limit = kMaxJsonBytes;
};

/// How waiting for one frame ended.
enum class FrameWait { Complete, Bad, TimedOut, Closed };

/// Feeds `reader` with what `receive` gets from `fd` (recv-like: bytes, 0 when the peer closed,
/// negative on an error) until a frame is complete (Complete, in `frame`), the stream is bad
/// (Bad: reader.error() says why), `deadline` passes (TimedOut) or the peer closes (Closed).
FrameWait waitForFrame(int fd, FrameReader& reader, std::chrono::steady_clock::time_point deadline, Frame* frame,
                       const std::function<long(char* buffer, std::size_t size)>& receive);

} // namespace hookscope::wire
