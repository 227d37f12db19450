// SHA-256 through OpenSSL's EVP: the standard's test vectors, and a file read in chunks.
#include "files/Sha256.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

using namespace hookscope;

TEST(Sha256Test, StandardVectorsAndAFileReadInChunks) {
  EXPECT_EQ(sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string million(1000000, 'a');
  EXPECT_EQ(sha256Hex(million), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  const auto path = std::filesystem::temp_directory_path() / ("hookscope-sha-" + std::to_string(::getpid()));
  std::ofstream(path, std::ios::binary) << million;
  EXPECT_EQ(sha256File(path.string()), sha256Hex(million));
  std::filesystem::remove(path);
  EXPECT_EQ(sha256File(path.string()), "");  // gone: no hash, never a wrong one
}
