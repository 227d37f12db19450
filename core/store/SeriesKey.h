#pragma once
// What names one series of the store (a module's tensor of one kind, on one rank) and where a
// rank's row sits in a sharded tensor: the words the store and the shard assembly share.

#include "common/CaptureKind.h"

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace hookscope {

/// The rank of a sharded tensor's whole-tensor series (made from every rank's shard), in the
/// store and the export; ranks() leaves it out: it is no process of the job.
constexpr int kWholeRank = -1;

/// Where one rank's row sits in a sharded tensor: part `part` of `parts`, of a whole of `shape`.
struct ShardPart {
  int part = 0;
  int parts = 1;
  std::vector<std::int64_t> shape;
};

/// Identifies one series: a tensor position in one call of one module, of one kind.
struct SeriesKey {
  std::string module;  ///< dotted module path ("" is the root); the parameter name for parameter kinds
  int call = 0;        ///< call number within a step (0 for parameters)
  CaptureKind kind = CaptureKind::Activation;
  int index = 0;       ///< position of the tensor in the module's output or input structure
  int rank = 0;        ///< the process of a torch.distributed job it came from (0 for one process);
                       ///< kWholeRank: a sharded tensor's whole

  bool operator<(const SeriesKey& o) const {
    return std::tie(module, call, kind, index, rank) < std::tie(o.module, o.call, o.kind, o.index, o.rank);
  }
  bool operator==(const SeriesKey& o) const {
    return std::tie(module, call, kind, index, rank) == std::tie(o.module, o.call, o.kind, o.index, o.rank);
  }
};

/// The module a series belongs to: its own path, or for the parameter kinds the module that
/// owns the parameter ("fc1" for "fc1.weight", "" for a parameter of the root).
std::string ownerModule(const SeriesKey& key);

} // namespace hookscope
