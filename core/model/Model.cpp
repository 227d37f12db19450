#include "model/Model.h"

#include "common/FileLimits.h"
#include "model/Instrumentation.h"
#include "model/ModelImpl.h"
#include "model/OperatorLibraries.h"
#include "model/TorchError.h"

#include <caffe2/serialize/inline_container.h>

#include <filesystem>
#include <map>
#include <set>
#include <fstream>
#include <regex>
#include <sstream>

namespace hookscope {

namespace fs = std::filesystem;

namespace {

constexpr const char* kInputSpecExtraFile = "hookscope/input_spec";

std::string howToSave() {
  return "HookScope opens a model saved in Python with torch.export.save(torch.export.export(model, (example,)), "
         "\"model.pt2\"), torch.jit.script(model).save(\"model.pt\") or torch.save(model, \"model.pt\"): save it so "
         "and open that file.";
}

// For a file whose format is newer than the linked LibTorch reads: both versions and what to
// do; "" when `reason` is about something else.
std::string explainNewerFormat(const std::string& reason) {
  static const std::regex version(R"(PyTorch file with version (\d+).*maximum supported version for reading is (\d+))");
  std::smatch match;
  if (!std::regex_search(reason, match, version)) return "";
  return "its file format version is " + match[1].str() + ", and PyTorch " + linkedTorchVersion() +
         " (the version HookScope is built on) reads up to version " + match[2].str() +
         ": the file was saved by a newer PyTorch. Save it with PyTorch " + linkedTorchVersion() +
         ", or build HookScope on the newer PyTorch (HOOKSCOPE_PYTHON=/path/to/python "
         "scripts/build.sh).";
}

// What LibTorch's refusal means for the user, and what to do about it.
std::string explainLoadError(const std::string& path, std::string reason) {
  while (!reason.empty() && reason.back() == '.') reason.pop_back();
  const std::string prefix = "LibTorch " + linkedTorchVersion() + " could not load " + path + ": ";
  if (std::string help = explainMissingOperator(reason); !help.empty()) {
    return prefix + reason + ". " + help;
  }
  if (std::string help = explainNewerFormat(reason); !help.empty()) return prefix + help;
  return prefix + reason + ". Check that the file is a TorchScript model saved by "
         "torch.jit.script(model).save(path) or torch.jit.trace(...).save(path).";
}

// Checks the things LibTorch reports badly (or not at all) before handing it the file.
// Returns "" when the file looks like a TorchScript archive.
std::string checkModelFile(const std::string& path) {
  std::error_code ec;
  const fs::path file(path);
  if (!fs::exists(file, ec)) {
    return "No file at " + path + ". Check the path and open an existing TorchScript .pt file.";
  }
  if (fs::is_directory(file, ec)) {
    return path + " is a folder, not a model file. Open the TorchScript .pt file inside it "
                  "(or use Open capture for a HookScope export folder).";
  }
  const auto size = fs::file_size(file, ec);
  if (ec) return "Cannot read " + path + ": " + ec.message() + ".";
  if (size == 0) {
    return path + " is empty (0 bytes), so it holds no model: it was probably not written "
                  "completely. " + howToSave();
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return "Cannot open " + path + " for reading: check its permissions.";
  char magic[4] = {0, 0, 0, 0};
  in.read(magic, 4);
  const bool zip = in.gcount() == 4 && magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 &&
                   magic[3] == 4;
  if (!zip) {
    if (static_cast<unsigned char>(magic[0]) == 0x80) {
      return path + " is a pickled eager PyTorch object (written by torch.save with the legacy "
                    "format), which C++ cannot load. " + howToSave();
    }
    return path + " is not a TorchScript archive (it is not a zip file). " + howToSave();
  }
  // A zip archive ends with its central directory; a truncated copy loses it first.
  const std::uint64_t tail = std::min<std::uint64_t>(size, 65536 + 22);
  std::string end(tail, '\0');
  in.clear();
  in.seekg(std::streamoff(size - tail));
  in.read(end.data(), std::streamsize(tail));
  if (end.find(std::string("PK\x05\x06", 4)) == std::string::npos) {
    return path + " is truncated or damaged: its zip directory is missing. Copy or save the "
                  "model again; the file on disk is incomplete.";
  }
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    std::uint64_t inflated = 0;
    bool hasCode = false;
    for (const auto& record : reader.getAllRecords()) {
      inflated += reader.getRecordSize(record);
      if (record.rfind("code/", 0) == 0) hasCode = true;
    }
    if (std::string problem = checkInflatedSize(path, size, inflated); !problem.empty()) return problem;
    if (!reader.hasRecord("constants.pkl")) {
      if (!hasCode) {
        return path + " was written by torch.save (an eager model or a state dict), not by "
                      "TorchScript, so it holds no code C++ can run. " + howToSave();
      }
    }
  } catch (const std::exception& e) {
    const std::string reason = summarizeTorchError(e);
    if (std::string help = explainNewerFormat(reason); !help.empty()) {
      return "LibTorch " + linkedTorchVersion() + " cannot read " + path + ": " + help;
    }
    // Whole, but with a record PyTorch does not write there: something added a file to it.
    if (reason.find("is not in a subdirectory") != std::string::npos) {
      const auto what = reason.find("file in archive");
      return path + " holds a file that PyTorch did not write (" + (what == std::string::npos ? reason : reason.substr(what)) +
             "): a tool added it to the archive after it was saved. Save the model again with torch.jit.save, "
             "or remove that file from the zip.";
    }
    return path + " is truncated or damaged (" + reason + "). Copy or save the model again.";
  }
  return "";
}

std::string shortTypeName(const torch::jit::Module& module) {
  const auto type = module.type();
  if (!type->name()) return "Module";
  return type->name()->name();
}

void collect(const torch::jit::Module& module, const std::string& path, const std::string& name,
             int parent, int depth, ModelImpl& impl, std::vector<ModuleInfo>& modules) {
  const int index = int(modules.size());
  ModuleInfo info;
  info.path = path;
  info.name = name;
  info.typeName = shortTypeName(module);
  info.qualifiedType = module.type()->name() ? module.type()->name()->qualifiedName() : "";
  info.parent = parent;
  info.depth = depth;
  std::vector<std::pair<std::string, at::Tensor>> own;
  for (const auto& param : module.named_parameters(/*recurse=*/false)) {
    const std::string full = path.empty() ? param.name : path + "." + param.name;
    info.params.push_back({full, param.value.sizes().vec(), param.value.numel()});
    info.ownParams += param.value.numel();
    own.emplace_back(full, param.value);
  }
  modules.push_back(std::move(info));
  impl.instances.push_back(module);
  impl.instancePaths.push_back(path);
  impl.ownParams.push_back(std::move(own));
  if (parent >= 0) modules[std::size_t(parent)].children.push_back(index);
  for (const auto& child : module.named_children()) {
    const std::string childPath = path.empty() ? child.name : path + "." + child.name;
    collect(child.value, childPath, child.name, index, depth + 1, impl, modules);
  }
}

// Tied parameters (one tensor held by two modules, as a language model's output head and its
// embedding) are counted once at every level, as PyTorch's parameters() counts them, and each
// later holder names the first.
void countParameters(const ModelImpl& impl, std::vector<ModuleInfo>& modules) {
  std::map<const c10::TensorImpl*, std::string> first;
  for (std::size_t m = 0; m < modules.size(); ++m) {
    auto& params = modules[m].params;
    for (std::size_t i = 0; i < params.size(); ++i) {
      const auto [found, fresh] = first.emplace(impl.ownParams[m][i].second.unsafeGetTensorImpl(), params[i].name);
      if (!fresh) params[i].sharedWith = found->second;
    }
  }
  // Over the distinct tensors of each subtree; children come after their parent.
  std::vector<std::set<const c10::TensorImpl*>> below(modules.size());
  for (std::size_t m = modules.size(); m-- > 0;) {
    for (const auto& param : impl.ownParams[m]) below[m].insert(param.second.unsafeGetTensorImpl());
    for (int c : modules[m].children) below[m].insert(below[std::size_t(c)].begin(), below[std::size_t(c)].end());
    std::int64_t total = 0;
    for (const auto* tensor : below[m]) total += tensor->numel();
    modules[m].totalParams = total;
    for (int c : modules[m].children) std::set<const c10::TensorImpl*>().swap(below[std::size_t(c)]);  // done with it
  }
}

std::string trim(std::string text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  const auto last = text.find_last_not_of(" \t\r\n");
  return text.substr(first, last - first + 1);
}

} // namespace

Model::~Model() = default;

std::unique_ptr<Model> Model::load(const std::string& path, std::string* error,
                                   const LoadOptions& options) {
  auto fail = [&](const std::string& message) {
    if (error) *error = message;
    return std::unique_ptr<Model>();
  };
  if (std::string problem = checkModelFile(path); !problem.empty()) return fail(problem);
  loadBundledOperatorLibraries();

  std::unique_ptr<Model> model(new Model());
  model->m_impl = std::make_shared<ModelImpl>();
  model->m_path = path;
  ModelImpl& impl = *model->m_impl;
  torch::jit::ExtraFilesMap extra{{kInputSpecExtraFile, ""}};
  try {
    impl.module = torch::jit::load(path, c10::Device(c10::kCPU), extra);
  } catch (const std::exception& e) {
    return fail(explainLoadError(path, summarizeTorchError(e)));
  }
  model->m_exampleInputSpec = trim(extra[kInputSpecExtraFile]);
  std::string rootName = shortTypeName(impl.module);
  collect(impl.module, "", rootName, -1, 0, impl, model->m_modules);
  countParameters(impl, model->m_modules);
  impl.flags.reset(new std::atomic<std::uint8_t>[impl.instances.size()]);
  impl.interventionKinds.reset(new std::atomic<std::uint8_t>[impl.instances.size()]);
  impl.interventionValues.reset(new std::atomic<double>[impl.instances.size()]);
  impl.outputInterventions.reset(new std::atomic<std::uint8_t>[impl.instances.size()]);
  for (std::size_t i = 0; i < impl.instances.size(); ++i) {
    impl.flags[i] = 0;
    impl.interventionKinds[i] = GradientIntervention::None;
    impl.interventionValues[i] = 0.0;
    impl.outputInterventions[i] = OutputIntervention::None;
  }
  if (options.instrument) {
    try {
      impl.tapSites = instrumentModule(impl.module, impl.instances);
      impl.instrumented = true;
    } catch (const std::exception& e) {
      return fail("HookScope could not instrument " + path + ": " + summarizeTorchError(e) +
                  ". Please report this with the model file.");
    }
  }
  return model;
}

std::string Model::fileName() const { return fs::path(m_path).filename().string(); }

int Model::findModule(const std::string& path) const {
  for (std::size_t i = 0; i < m_modules.size(); ++i) {
    if (m_modules[i].path == path) return int(i);
  }
  return -1;
}

std::map<std::string, std::string> Model::moduleTypes() const {
  std::map<std::string, std::string> types;
  for (const auto& info : m_modules) types[info.path] = info.typeName;
  return types;
}

bool Model::instrumented() const { return m_impl->instrumented; }
int Model::tapSites() const { return m_impl->tapSites; }

void Model::setHook(int module, CaptureKind kind, bool on) {
  if (!hasModule(module)) return;
  if (on) {
    m_impl->flags[std::size_t(module)].fetch_or(kindBit(kind));
  } else {
    m_impl->flags[std::size_t(module)].fetch_and(std::uint8_t(~kindBit(kind)));
  }
}

void Model::setHooks(int module, std::uint8_t mask) {
  if (!hasModule(module)) return;
  m_impl->flags[std::size_t(module)] = mask;
}

std::uint8_t Model::hooks(int module) const {
  if (!hasModule(module)) return 0;
  return m_impl->flags[std::size_t(module)].load();
}

void Model::setGradientIntervention(int module, GradientIntervention intervention) {
  if (!hasModule(module)) return;
  m_impl->interventionValues[std::size_t(module)] = intervention.value;
  m_impl->interventionKinds[std::size_t(module)] = intervention.kind;
}

GradientIntervention Model::gradientIntervention(int module) const {
  if (!hasModule(module)) return {};
  return {GradientIntervention::Kind(m_impl->interventionKinds[std::size_t(module)].load()),
          m_impl->interventionValues[std::size_t(module)].load()};
}

void Model::setOutputIntervention(int module, OutputIntervention intervention) {
  if (!hasModule(module)) return;
  m_impl->outputInterventions[std::size_t(module)] = intervention.kind;
}

OutputIntervention Model::outputIntervention(int module) const {
  if (!hasModule(module)) return {};
  return {OutputIntervention::Kind(m_impl->outputInterventions[std::size_t(module)].load())};
}

void Model::clearHooks() {
  for (std::size_t i = 0; i < m_modules.size(); ++i) m_impl->flags[i] = 0;
}

} // namespace hookscope
