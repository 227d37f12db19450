#include "model/Instrumentation.h"

#include "model/TapOperators.h"

#include <torch/csrc/jit/ir/ir.h>

#include <cctype>
#include <unordered_set>

namespace hookscope {

namespace {

void collectCalls(torch::jit::Block* block, std::vector<torch::jit::Node*>& calls) {
  for (torch::jit::Node* node : block->nodes()) {
    for (torch::jit::Block* inner : node->blocks()) collectCalls(inner, calls);
    if (node->kind() == c10::prim::CallMethod && isModuleCallMethod(node->s(c10::attr::name))) {
      calls.push_back(node);
    }
  }
}

void tapCall(torch::jit::Graph& graph, torch::jit::Node* call) {
  torch::jit::Value* callee = call->input(0);
  torch::jit::WithInsertPoint beforeCall(call);
  torch::jit::Value* id = graph.insertGetAttr(callee, kModuleIdAttribute);
  std::vector<torch::jit::Value*> args(call->inputs().begin() + 1, call->inputs().end());
  torch::jit::Value* packed = graph.insertNode(graph.createTuple(args))->output();
  graph.insertNode(graph.create(tapInputSymbol(), {packed, id}, 0));
  // The tap returns the result (or an intervention's replacement); later uses take that.
  torch::jit::Node* outputTap = graph.create(tapOutputSymbol(), {call->output(), id}, 1);
  outputTap->output()->setType(call->output()->type());
  outputTap->insertAfter(call);
  call->output()->replaceAllUsesAfterNodeWith(outputTap, outputTap->output());
}

} // namespace

bool isModuleCallMethod(const std::string& name) {
  if (name.rfind("forward", 0) != 0) return false;
  std::string rest = name.substr(7);
  if (rest.rfind("__", 0) == 0) rest = rest.substr(2);
  for (char c : rest) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return name == "forward" || !rest.empty();
}

int instrumentModule(torch::jit::Module& root, std::vector<torch::jit::Module>& instances) {
  registerTapOperators();
  (void)root;
  for (std::size_t i = 0; i < instances.size(); ++i) {
    instances[i].register_attribute(kModuleIdAttribute, c10::IntType::get(),
                                    static_cast<std::int64_t>(i));
  }
  // Modules of one configuration share a type and its graphs: rewrite each graph once.
  std::unordered_set<const torch::jit::Graph*> done;
  int sites = 0;
  for (auto& instance : instances) {
    for (const auto& method : instance.get_methods()) {
      std::shared_ptr<torch::jit::Graph> graph = method.graph();
      if (!done.insert(graph.get()).second) continue;
      std::vector<torch::jit::Node*> calls;
      collectCalls(graph->block(), calls);
      for (torch::jit::Node* call : calls) tapCall(*graph, call);
      sites += int(calls.size());
    }
  }
  return sites;
}

} // namespace hookscope
