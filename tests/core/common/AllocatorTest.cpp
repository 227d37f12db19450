// keepFreedMemory: a block freed and allocated again, as every training step does, is
// served from memory the process kept, without the kernel mapping fresh pages.
#include "common/Allocator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__) && !defined(__SANITIZE_THREAD__)  // ThreadSanitizer brings its own malloc

namespace {

// Page faults while allocating, filling and freeing `bytes`.
long faultsOfOneBlock(std::size_t bytes) {
  const long before = hookscope::minorPageFaults();
  void* block = std::malloc(bytes);
  std::memset(block, 1, bytes);
  asm volatile("" : : "r"(block) : "memory");  // the fill is not optimized away
  std::free(block);
  return hookscope::minorPageFaults() - before;
}

} // namespace

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HOOKSCOPE_UNDER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define HOOKSCOPE_UNDER_ASAN 1
#endif

TEST(AllocatorTest, ABlockFreedAndAllocatedAgainTakesNoFreshPages) {
#ifdef HOOKSCOPE_UNDER_ASAN
  GTEST_SKIP() << "AddressSanitizer replaces malloc, so glibc's mallopt settings do not apply";
#endif
  hookscope::keepFreedMemory();
  constexpr std::size_t kBytes = std::size_t(40) << 20;  // 10,240 pages of 4 KiB
  faultsOfOneBlock(kBytes);                               // the first time maps them
  for (int again = 0; again < 3; ++again) {
    EXPECT_LT(faultsOfOneBlock(kBytes), 100) << "time " << again + 2;
  }
}
#endif
