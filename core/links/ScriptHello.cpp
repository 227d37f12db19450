#include "links/ScriptHello.h"

#include "wire/WireFrame.h"
#include "wire/WireJson.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>

namespace hookscope {

using nlohmann::json;

namespace {

constexpr std::size_t kMaxModules = 1000000;

// One module entry of the hello, without its place in the tree.
ModuleInfo moduleEntry(const json& entry) {
  ModuleInfo info;
  info.path = wireString(entry, "path");
  info.typeName = wireString(entry, "type");
  info.qualifiedType = info.typeName;
  bool ok = true;
  info.ownParams = wireInt(entry, "params", 0, std::numeric_limits<std::int64_t>::max() / 2, &ok);
  if (!ok) info.ownParams = 0;
  // The count with tied parameters once (hookscope 0.2 on); without it, own counts add up.
  ok = true;
  info.totalParams = wireInt(entry, "total", 0, std::numeric_limits<std::int64_t>::max() / 2, &ok);
  if (!ok) info.totalParams = -1;
  if (const auto shared = entry.find("shared"); shared != entry.end() && shared->is_array()) {
    for (const auto& pair : *shared) {
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string()) continue;
      if (info.params.size() >= 64) break;
      ParamInfo param;
      param.name = pair[0].get<std::string>().substr(0, kMaxWireStringBytes);
      param.sharedWith = pair[1].get<std::string>().substr(0, kMaxWireStringBytes);
      info.params.push_back(std::move(param));
    }
  }
  return info;
}

// Builds the module tree from the hello's list, which is in named_modules() order (parents first).
bool buildTree(const json& list, std::vector<ModuleInfo>* modules, std::map<std::string, int>* index,
               std::string* error) {
  if (!list.is_array() || list.empty() || list.size() > kMaxModules) {
    *error = "the hello lists no modules (or over " + std::to_string(kMaxModules) + ")";
    return false;
  }
  for (const auto& entry : list) {
    if (!entry.is_object()) {
      *error = "a module entry of the hello is not an object";
      return false;
    }
    ModuleInfo info = moduleEntry(entry);
    const int self = int(modules->size());
    if (self == 0) {
      if (!info.path.empty()) {
        *error = "the hello's first module is not the root (path \"\")";
        return false;
      }
      info.name = info.typeName;
    } else {
      if (info.path.empty() || index->count(info.path)) {
        *error = "the hello lists module '" + info.path + "' twice, or a second root";
        return false;
      }
      const auto dot = info.path.rfind('.');
      const std::string parentPath = dot == std::string::npos ? "" : info.path.substr(0, dot);
      const auto parent = index->find(parentPath);
      if (parent == index->end()) {
        *error = "the hello lists module '" + info.path + "' before its parent";
        return false;
      }
      info.name = dot == std::string::npos ? info.path : info.path.substr(dot + 1);
      info.parent = parent->second;
      info.depth = (*modules)[std::size_t(parent->second)].depth + 1;
      (*modules)[std::size_t(parent->second)].children.push_back(self);
    }
    (*index)[info.path] = self;
    modules->push_back(std::move(info));
  }
  // A peer that counted each module's parameters itself (tied ones once) is believed; for one
  // that did not, own counts add up the tree.
  const bool counted = std::all_of(modules->begin(), modules->end(), [](const ModuleInfo& m) { return m.totalParams >= 0; });
  if (!counted) {
    for (auto& m : *modules) m.totalParams = m.ownParams;
    for (std::size_t i = modules->size(); i-- > 1;) {
      auto& m = (*modules)[i];
      (*modules)[std::size_t(m.parent)].totalParams += m.totalParams;
    }
  }
  return true;
}

// Who the peer is; its rank and world size when it is a rank of a job.
bool readScript(const json& hello, ScriptRecord* script, std::string* error) {
  bool ok = true;
  script->name = wireString(hello, "name");
  script->pid = wireInt(hello, "pid", 0, std::numeric_limits<std::int64_t>::max(), &ok);
  script->host = wireString(hello, "host");
  script->python = wireString(hello, "python");
  script->torch = wireString(hello, "torch");
  script->device = wireString(hello, "device");
  script->dtype = wireString(hello, "dtype");
  script->optimizer = wireString(hello, "optimizer");
  if (const auto dist = hello.find("dist"); dist != hello.end() && dist->is_object()) {
    ok = true;
    const auto world = wireInt(*dist, "world_size", 1, 1 << 20, &ok);
    const auto rank = wireInt(*dist, "rank", 0, world - 1, &ok);
    if (!ok) {
      *error = "the hello's dist has no rank in [0, world_size) or no world_size";
      return false;
    }
    script->rank = int(rank);
    script->worldSize = int(world);
    script->job = wireString(*dist, "job");
  }
  return true;
}

} // namespace

bool ScriptHello::read(const json& hello, ScriptHello* out, std::string* error) {
  bool ok = true;
  const auto protocol = wireInt(hello, "protocol", 0, 1 << 20, &ok);
  if (!ok || protocol != wire::kProtocolVersion) {
    *error = wire::versionAdvice(int(protocol));
    return false;
  }
  if (!buildTree(hello.contains("modules") ? hello["modules"] : json(), &out->modules, &out->moduleIndex, error)) {
    return false;
  }
  if (!readScript(hello, &out->script, error)) return false;
  if (const auto engine = hello.find("engine"); engine != hello.end() && engine->is_object()) {
    EngineHello e;
    e.model = wireString(*engine, "model");
    e.exampleInput = wireString(*engine, "example_input");
    e.sha256 = wireString(*engine, "sha256");
    e.confinement = wireString(*engine, "confinement");
    out->engine = e;
  }
  if (const auto params = hello.find("parameters"); params != hello.end()) {
    if (!params->is_array() || params->size() > kMaxModules) {
      *error = "the hello's parameters are not a list of names";
      return false;
    }
    for (const auto& name : *params) {
      if (!name.is_string()) {
        *error = "the hello's parameters are not a list of names";
        return false;
      }
      out->parameters.push_back(name.get<std::string>().substr(0, kMaxWireStringBytes));
    }
  }
  return true;
}

} // namespace hookscope
