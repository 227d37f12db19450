#pragma once

#include "common/CaptureKind.h"
#include "common/ModelTypes.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace hookscope {

struct ModelImpl;

/// What load() does besides reading the file.
struct LoadOptions {
  bool instrument = true;  ///< false gives a plain module, for overhead baselines
};

/// A loaded TorchScript model with its module tree and per-module hook switches.
class Model {
public:
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  /// Loads and instruments a TorchScript file; on failure returns null and sets `error`
  /// to a message that says what is wrong and what to do.
  static std::unique_ptr<Model> load(const std::string& path, std::string* error,
                                     const LoadOptions& options = {});

  const std::string& path() const { return m_path; }
  /// The file name without folders.
  std::string fileName() const;
  /// The input spec stored in the archive as extra file "hookscope/input_spec", or "".
  const std::string& exampleInputSpec() const { return m_exampleInputSpec; }
  /// Modules in pre-order, children in definition order; index 0 is the root.
  const std::vector<ModuleInfo>& modules() const { return m_modules; }
  /// Index of the module with this dotted path, or -1.
  int findModule(const std::string& path) const;
  /// Each module's short type name by dotted path, what RuleEvaluator::setModuleTypes takes.
  std::map<std::string, std::string> moduleTypes() const;
  bool instrumented() const;
  /// Number of submodule call sites that carry taps.
  int tapSites() const;

  /// Switches capture of one kind on one module; takes effect at the module's next call.
  void setHook(int module, CaptureKind kind, bool on);
  /// Sets all kinds of one module at once (bit mask of kindBit()).
  void setHooks(int module, std::uint8_t mask);
  std::uint8_t hooks(int module) const;
  /// Switches every hook of every module off.
  void clearHooks();

  /// Sets the gradient intervention of one module; takes effect at the module's next call.
  void setGradientIntervention(int module, GradientIntervention intervention);
  GradientIntervention gradientIntervention(int module) const;
  /// Sets the output intervention of one module; takes effect at the module's next call.
  void setOutputIntervention(int module, OutputIntervention intervention);
  OutputIntervention outputIntervention(int module) const;

  /// The LibTorch side; for core only.
  ModelImpl& impl() { return *m_impl; }
  std::shared_ptr<ModelImpl> sharedImpl() { return m_impl; }

private:
  Model() = default;
  /// Whether `module` is an index into modules(); the setters ignore, the getters answer
  /// "nothing" for, any other.
  bool hasModule(int module) const { return module >= 0 && std::size_t(module) < m_modules.size(); }
  std::shared_ptr<ModelImpl> m_impl;
  std::string m_path;
  std::string m_exampleInputSpec;
  std::vector<ModuleInfo> m_modules;
};

} // namespace hookscope
