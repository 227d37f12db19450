#include "wire/WireAuth.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <sys/random.h>

namespace hookscope::wire {

namespace {

std::string hex(const unsigned char* bytes, std::size_t size) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(size * 2);
  for (std::size_t i = 0; i < size; ++i) {
    out += digits[bytes[i] >> 4];
    out += digits[bytes[i] & 15];
  }
  return out;
}

std::string hmacHex(const std::string& key, const std::string& message) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  ::HMAC(EVP_sha256(), key.data(), int(key.size()), reinterpret_cast<const unsigned char*>(message.data()),
         message.size(), mac, &length);
  return hex(mac, length);
}

} // namespace

std::string randomHex(std::size_t bytes) {
  std::string raw(bytes, '\0');
  std::size_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::getrandom(raw.data() + got, bytes - got, 0);
    if (n > 0) got += std::size_t(n);
  }
  return hex(reinterpret_cast<const unsigned char*>(raw.data()), raw.size());
}

std::string scriptProof(const std::string& token, const std::string& listenerNonce, const std::string& scriptNonce) {
  return hmacHex(token, "hookscope script " + listenerNonce + " " + scriptNonce);
}

std::string listenerProof(const std::string& token, const std::string& listenerNonce, const std::string& scriptNonce) {
  return hmacHex(token, "hookscope listener " + listenerNonce + " " + scriptNonce);
}

bool constantTimeEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

} // namespace hookscope::wire
