#pragma once
// The token handshake of a TCP attach (docs/protocol.md, "The token over TCP"): before a script
// sends its hello or obeys a word, and before HookScope reads more than a few bytes of it, each
// side proves it knows the token without sending it: HMAC-SHA256 of both sides' nonces.
//
//   HookScope -> script   {"type": "challenge", "nonce": N1}
//   script -> HookScope   {"type": "answer", "nonce": N2, "mac": HMAC(token, "hookscope script N1 N2")}
//   HookScope -> script   {"type": "proof", "mac": HMAC(token, "hookscope listener N1 N2")}
//   script -> HookScope   its hello
//
// No LibTorch here.

#include <cstdint>
#include <string>

namespace hookscope::wire {

/// The most a peer may send before it has proved the token (its answer is ~200 bytes).
constexpr std::uint32_t kMaxUnprovenBytes = 4096;

/// `bytes` random bytes (getrandom) as lower-case hex.
std::string randomHex(std::size_t bytes);
/// What the script sends: HMAC-SHA256(token, "hookscope script N1 N2"), hex.
std::string scriptProof(const std::string& token, const std::string& listenerNonce, const std::string& scriptNonce);
/// What the listener sends back: HMAC-SHA256(token, "hookscope listener N1 N2"), hex.
std::string listenerProof(const std::string& token, const std::string& listenerNonce, const std::string& scriptNonce);
/// Equal strings, compared in a time that does not depend on where they differ.
bool constantTimeEqual(const std::string& a, const std::string& b);

} // namespace hookscope::wire
