#pragma once
// Process-wide settings HookScope's programs make once, at start.

namespace hookscope {

/// Keeps memory the process frees for its next allocations instead of handing it back to
/// the kernel at once (glibc's malloc; elsewhere it does nothing). A training step frees and
/// allocates the same sizes every step. By default glibc gives large freed blocks back and
/// takes them again, page by page, every step: about 20,000 page faults per resnet18 step
/// with every module hooked, where the statistics thread keeps tensors a little longer than
/// the model alone would. Blocks up to 64 MiB then come from malloc's heap, and up to 256 MiB
/// of free memory stays at its top. Call it first thing in main().
void keepFreedMemory();

/// Minor page faults of this process so far: the kernel mapping a fresh page on first touch.
/// What keepFreedMemory saves, for its test and the benchmarks.
long minorPageFaults();

} // namespace hookscope
