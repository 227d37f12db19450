#include "files/Sha256.h"

#include <openssl/evp.h>

#include <fstream>
#include <memory>
#include <vector>

namespace hookscope {

namespace {

// OpenSSL's EVP digest, fed in chunks; "" when OpenSSL fails.
class Digest {
public:
  Digest() : m_context(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    m_ok = m_context && EVP_DigestInit_ex(m_context.get(), EVP_sha256(), nullptr) == 1;
  }
  void update(const char* data, std::size_t size) {
    m_ok = m_ok && EVP_DigestUpdate(m_context.get(), data, size) == 1;
  }
  std::string hex() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    if (!m_ok || EVP_DigestFinal_ex(m_context.get(), digest, &length) != 1) return "";
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < length; ++i) {
      out += digits[digest[i] >> 4];
      out += digits[digest[i] & 15];
    }
    return out;
  }

private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> m_context;
  bool m_ok = false;
};

} // namespace

std::string sha256File(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  Digest digest;
  std::vector<char> buffer(1 << 16);
  while (in) {
    in.read(buffer.data(), std::streamsize(buffer.size()));
    digest.update(buffer.data(), std::size_t(in.gcount()));
  }
  if (in.bad()) return "";
  return digest.hex();
}

std::string sha256Hex(const std::string& bytes) {
  Digest digest;
  digest.update(bytes.data(), bytes.size());
  return digest.hex();
}

} // namespace hookscope
