#pragma once
// What a model's tree and its interventions are, as plain values: the engine fills them from
// LibTorch, the viewer from the wire. No LibTorch here.

#include <cstdint>
#include <string>
#include <vector>

namespace hookscope {

/// One parameter of a module.
struct ParamInfo {
  std::string name;  ///< full dotted name, e.g. "layer1.0.conv1.weight"
  std::vector<std::int64_t> shape;
  std::int64_t numel = 0;
  /// The name this tensor has where it first appears, when it is tied to (the same tensor as)
  /// a parameter of a module before this one ("tok.weight"); "" otherwise.
  std::string sharedWith;
};

/// One module instance in the tree.
struct ModuleInfo {
  std::string path;      ///< dotted path; "" for the root
  std::string name;      ///< last path component; the class name for the root
  std::string typeName;  ///< short class name, e.g. "Conv2d"
  std::string qualifiedType;
  int parent = -1;
  int depth = 0;
  std::vector<int> children;  ///< in definition order
  std::int64_t ownParams = 0;
  std::int64_t totalParams = 0;  ///< own plus every descendant's, each tensor once (as PyTorch's parameters())
  std::vector<ParamInfo> params;  ///< own parameters only
};

/// A change to what flows back through a module's output, like a gradient hook in PyTorch
/// that returns a new gradient. Captures still record the gradient before it.
struct GradientIntervention {
  enum Kind : std::uint8_t { None = 0, Clamp, Scale, Zero };
  Kind kind = None;
  double value = 0;  ///< the bound v of clamp to [-v, v], or the factor of scale

  /// "clamp 0.01", "scale 0.5", "zero", or "" for none.
  std::string describe() const;
};

/// A change to what a module's call returns, like a PyTorch forward hook that returns a new
/// output (ablation). Applies to modules that return a tensor; captures see the output before.
struct OutputIntervention {
  enum Kind : std::uint8_t { None = 0, Zero, Mean };
  Kind kind = None;
  /// "zero", "mean", or "" for none.
  std::string describe() const;
};

/// Output shapes of one module call, for the tree and for `inspect`.
struct ModuleCallShape {
  std::string module;
  int call = 0;
  std::vector<std::string> shapes;
};

} // namespace hookscope
