// The CPU statistics kernel alone, on one core, in ns a value: what stats_kernel_compare.sh
// builds from two revisions of core/kernels and runs side by side. STATS_HEADER names the
// kernel's header (RawStats.h; RawStatistics.h before its rename).
#include STATS_HEADER

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

int main(int argc, char** argv) {
  const std::int64_t n = argc > 1 ? std::atoll(argv[1]) : 1000000;
  std::vector<float> values(static_cast<std::size_t>(n));
  std::mt19937 random(0);
  std::normal_distribution<float> normal;
  for (auto& v : values) v = normal(random);
  const int repeats = n >= 10000000 ? 40 : n >= 1000000 ? 300 : 3000;
  std::vector<double> us;
  for (int i = 0; i < repeats; ++i) {
    hookscope::TensorStats s;
    const auto start = std::chrono::steady_clock::now();
    hookscope::computeRawStats(values.data(), n, 64, hookscope::StatsCores::One, s);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(us.begin(), us.end());
  const double median = us[us.size() / 2];
  std::printf("RESULT stats_kernel numel=%lld us=%.1f ns_per_value=%.3f\n", (long long)n, median, median * 1000 / double(n));
  return 0;
}
