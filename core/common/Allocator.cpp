#include "common/Allocator.h"

#include <sys/resource.h>

#include <cstdlib>  // defines __GLIBC__ where it applies

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace hookscope {

void keepFreedMemory() {
#if defined(__GLIBC__)
  // Fixed values also turn off glibc's own moving thresholds, which start at 128 KiB.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
}

long minorPageFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

} // namespace hookscope
