#pragma once
// Internal to core/kernels: which instruction sets a loop is compiled for.

// The float32 loops get AVX-512 (x86-64-v4) and AVX2 with FMA (x86-64-v3) versions, chosen at
// run time by what the CPU has, beside the baseline x86-64 one (LibTorch's own kernels
// dispatch the same way).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define HOOKSCOPE_PER_TARGET_LOOPS 1
#else
#define HOOKSCOPE_PER_TARGET_LOOPS 0
#endif

#if HOOKSCOPE_PER_TARGET_LOOPS
#define HOOKSCOPE_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define HOOKSCOPE_SIMD_CLONES
#endif

// Where a loop is written with vectors of its own width for each instruction set and one is
// chosen at run time (__builtin_cpu_supports): where the clones are made.
#define HOOKSCOPE_LANE_DISPATCH HOOKSCOPE_PER_TARGET_LOOPS
