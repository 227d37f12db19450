#pragma once
// A sharded tensor's whole statistics from its shards' rows (docs/distributed.md): each rank of
// a job sends its shard's row binned between the whole tensor's edges (the hookscope package's
// _sharded makes them one with a collective at the step's end), and the parts add up here.

#include "kernels/TensorStats.h"
#include "store/SeriesKey.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace hookscope {

/// The whole tensor's statistics from its parts' rows (every part binned between the same
/// edges): min, max, counts and the histogram exactly as of the gathered tensor; the mean, the
/// std (Chan's pairwise combination of each part's moments) and the L2 norm to rounding.
/// False with why when the parts do not fit together (edges, bins, dtype or sizes differ).
bool combineShards(const std::vector<const TensorStats*>& parts, const std::vector<std::int64_t>& shape,
                   TensorStats* whole, std::string* why);

/// Parts of a step's sharded tensors until each is whole. Thread-safe (one thread per rank).
class ShardAssembly {
public:
  /// Takes one part of `key` (its rank is the sender's) at `step`; true and `whole` filled when
  /// it was the last one. A part of a step this far behind the newest is given up on.
  bool add(std::int64_t step, const SeriesKey& key, const TensorStats& stats, const ShardPart& part,
           TensorStats* whole);
  /// Why the last tensor whose parts did not fit was not made whole ("" when none was).
  std::string lastProblem() const;

  static constexpr std::int64_t kStepsKept = 8;

private:
  struct Pending {
    int parts = 0;
    std::vector<std::int64_t> shape;
    std::map<int, TensorStats> got;  ///< by part
  };
  mutable std::mutex m_mutex;
  std::map<std::pair<std::int64_t, SeriesKey>, Pending> m_pending;  ///< keys with rank kWholeRank
  std::int64_t m_newest = -1;
  std::string m_problem;
};

} // namespace hookscope
