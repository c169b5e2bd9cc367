// The graph walk both executors share (lib/nn/walk.hpp), without a backend:
// how the backward pass delivers gradients (overwrite, add, share), which
// nodes run when with the step hooks, and which buffers inference reuses.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "nn/graph.hpp"
#include "nn/walk.hpp"

namespace nn = syncopt::nn;

namespace {

int node_id(const syncopt::nn::Graph& g, const std::string& name) {
  for (std::size_t j = 0; j < g.nodes.size(); ++j) {
    if (g.nodes[j].name == name) return static_cast<int>(j);
  }
  FAIL("no node " << name);
  return -1;
}

// The invariants of a gradient plan: every reader of a tensor contributes
// once; the first contribution in backward order (the highest node, slot 0
// before slot 1) overwrites or shares, every later one adds; only an add's
// input 0 that nothing else reads shares, and then it uses the add's buffer;
// the images take contributions only when their gradient is wanted.
void check_plan(const syncopt::nn::Graph& g, bool input_grad) {
  using nn::Delivery;
  const nn::GradientPlan p = nn::plan_gradients(g, input_grad);
  REQUIRE(p.into.size() == g.nodes.size());
  REQUIRE(p.buffer.size() == g.nodes.size());
  std::vector<int> seen(g.nodes.size(), 0);
  int input_seen = 0;
  for (std::size_t j = g.nodes.size(); j-- > 0;) {
    const syncopt::nn::Node& n = g.nodes[j];
    for (std::size_t slot = 0; slot < 2; ++slot) {
      const Delivery d = p.into[j][slot];
      INFO("node " << n.name << " slot " << slot);
      if (slot >= n.inputs.size()) {
        CHECK(d == Delivery::kNone);
        continue;
      }
      const int id = n.inputs[slot];
      if (id == syncopt::nn::kGraphInput) {
        if (!input_grad) {
          CHECK(d == Delivery::kNone);
        } else {
          CHECK(d == (input_seen++ == 0 ? Delivery::kWrite : Delivery::kAccumulate));
        }
        continue;
      }
      const auto k = static_cast<std::size_t>(id);
      if (seen[k]++ == 0) {
        CHECK((d == Delivery::kWrite || d == Delivery::kShared));
      } else {
        CHECK(d == Delivery::kAccumulate);
      }
      if (d == Delivery::kShared) {
        CHECK(n.type == syncopt::nn::LayerType::kAdd);
        CHECK(slot == 0);
        CHECK(g.consumers_count[k] == 1);
        CHECK(p.buffer[k] == p.buffer[j]);
      }
    }
  }
  for (std::size_t k = 0; k < g.nodes.size(); ++k) {
    INFO("node " << g.nodes[k].name);
    CHECK(seen[k] == g.consumers_count[k]);
    // Every node's buffer is owned by the node itself or a later one that owns it.
    const int b = p.buffer[k];
    CHECK(b >= static_cast<int>(k));
    CHECK(p.buffer[static_cast<std::size_t>(b)] == b);
  }
}

}  // namespace

TEST_CASE("plan_gradients: sums for tensors read twice, shared buffers for lone add inputs",
          "[nn][walk]") {
  using nn::Delivery;
  nn::ModelSpec spec;
  spec.model = nn::Builtin::kResnet20;
  const nn::Graph r20 = nn::model_graph(spec);
  for (const bool input_grad : {false, true}) {
    check_plan(r20, input_grad);
    spec.model = nn::Builtin::kCnn;
    check_plan(nn::model_graph(spec), input_grad);
  }
  const nn::GradientPlan p = nn::plan_gradients(r20, false);
  // An identity block (s1b2): the add shares its buffer with bn2 and hands
  // the block's input (s1b1.out, read by s1b2.conv1 too) its first
  // contribution; conv1's backward-data adds the second.
  const int add = node_id(r20, "s1b2.add"), conv1 = node_id(r20, "s1b2.conv1");
  const int bn2 = node_id(r20, "s1b2.bn2"), in = node_id(r20, "s1b1.add");
  CHECK(r20.nodes[static_cast<std::size_t>(add)].inputs == std::vector<int>{bn2, in});
  CHECK(p.into[static_cast<std::size_t>(add)][0] == Delivery::kShared);
  CHECK(p.buffer[static_cast<std::size_t>(bn2)] == add);
  CHECK(p.into[static_cast<std::size_t>(add)][1] == Delivery::kWrite);
  CHECK(p.into[static_cast<std::size_t>(conv1)][0] == Delivery::kAccumulate);
  // A projection block (s2b1): the shortcut's batch norm gets a copy (input
  // 1 never shares); the block's input is read by the projection (later in
  // the node list: first in backward) and by conv1.
  const int padd = node_id(r20, "s2b1.add"), proj = node_id(r20, "s2b1.add.proj");
  const int proj_bn = node_id(r20, "s2b1.add.proj_bn"), pconv1 = node_id(r20, "s2b1.conv1");
  CHECK(r20.nodes[static_cast<std::size_t>(padd)].inputs[1] == proj_bn);
  CHECK(p.into[static_cast<std::size_t>(padd)][0] == Delivery::kShared);
  CHECK(p.into[static_cast<std::size_t>(padd)][1] == Delivery::kWrite);
  CHECK(p.buffer[static_cast<std::size_t>(proj_bn)] == proj_bn);
  CHECK(p.into[static_cast<std::size_t>(proj)][0] == Delivery::kWrite);
  CHECK(p.into[static_cast<std::size_t>(pconv1)][0] == Delivery::kAccumulate);
  // The stem conv reads the images: nothing unless their gradient is wanted.
  CHECK(p.into[0][0] == Delivery::kNone);
  CHECK(nn::plan_gradients(r20, true).into[0][0] == Delivery::kWrite);

  // x + x: one tensor in both slots of an add: a write, then a sum (never shared).
  nn::GraphSpec twice;
  twice.name = "twice";
  twice.channels = 2;
  twice.height = twice.width = 3;
  twice.classes = 0;
  nn::LayerDesc c;
  c.type = nn::LayerType::kConv;
  c.name = "c";
  c.out = 2;
  c.pad = 1;
  nn::LayerDesc a;
  a.type = nn::LayerType::kAdd;
  a.from = "c";
  twice.layers = {c, a};
  const nn::Graph tg = nn::build_graph(twice);
  check_plan(tg, true);
  const nn::GradientPlan tp = nn::plan_gradients(tg, true);
  CHECK(tp.into[1][0] == Delivery::kWrite);
  CHECK(tp.into[1][1] == Delivery::kAccumulate);
  CHECK(tp.buffer[0] == 0);
  // An add of the images: its input 1 takes the images' first contribution,
  // the conv's backward-data the second.
  a.from = "input";
  twice.layers = {c, a};
  const nn::Graph ig = nn::build_graph(twice);
  check_plan(ig, true);
  const nn::GradientPlan ip = nn::plan_gradients(ig, true);
  CHECK(ip.into[1][0] == Delivery::kShared);
  CHECK(ip.into[1][1] == Delivery::kWrite);
  CHECK(ip.into[0][0] == Delivery::kAccumulate);
}

namespace {

// Hooks that log what they are told, as "need <offset> <count>" and
// "ready <offset>", between the events the walk's callbacks log.
class LogHooks final : public nn::StepHooks {
 public:
  LogHooks(std::size_t count, std::vector<std::string>& log) : StepHooks(count), m_log(log) {}
  void need_params(std::size_t offset, std::size_t count) override {
    m_log.push_back("need " + std::to_string(offset) + " " + std::to_string(count));
  }
  void grads_ready(std::size_t offset, float) override {
    m_log.push_back("ready " + std::to_string(offset));
  }

 private:
  std::vector<std::string>& m_log;
};

nn::Graph builtin(nn::Builtin b) {
  nn::ModelSpec spec;
  spec.model = b;
  return nn::model_graph(spec);
}

}  // namespace

TEST_CASE("walk_forward asks for each layer's parameters just before it, in order", "[nn][walk]") {
  const nn::Graph g = builtin(nn::Builtin::kResnet20);
  std::vector<std::string> log;
  LogHooks hooks(g.layout.count, log);
  nn::walk_forward(g, &hooks, [&](std::size_t j) { log.push_back("run " + g.nodes[j].name); });
  std::vector<std::string> want;
  for (const nn::Node& n : g.nodes) {
    if (n.param_count > 0) {
      want.push_back("need " + std::to_string(n.param_offset) + " " +
                     std::to_string(n.param_count));
    }
    want.push_back("run " + n.name);
  }
  CHECK(log == want);
  // Without hooks: the same nodes, nothing asked.
  log.clear();
  nn::walk_forward(g, nullptr, [&](std::size_t j) { log.push_back(g.nodes[j].name); });
  REQUIRE(log.size() == g.nodes.size());
  CHECK(log.front() == g.nodes.front().name);
}

TEST_CASE("walk_backward: nodes in reverse, a group done right after its node", "[nn][walk]") {
  const nn::Graph g = builtin(nn::Builtin::kCnn);
  std::vector<std::string> log;
  nn::walk_backward(
      g, [&](std::size_t j) { log.push_back("run " + g.nodes[j].name); },
      [&](std::size_t j) { log.push_back("done " + std::to_string(g.nodes[j].param_offset)); });
  std::vector<std::string> want;
  for (std::size_t j = g.nodes.size(); j-- > 0;) {
    want.push_back("run " + g.nodes[j].name);
    if (g.nodes[j].param_count > 0)
      want.push_back("done " + std::to_string(g.nodes[j].param_offset));
  }
  CHECK(log == want);
  // The last group done is the bottom one: the whole gradient.
  CHECK(log.back() == "done 0");
}

TEST_CASE("last_uses: a tensor lives to its last reader, the logits to the end", "[nn][walk]") {
  using T = nn::LayerType;
  nn::GraphSpec s;
  s.name = "t";
  s.channels = 2;
  s.height = s.width = 4;
  s.classes = 0;
  nn::LayerDesc c;
  c.type = T::kConv;
  c.name = "c";
  c.out = 2;
  c.pad = 1;
  nn::LayerDesc d;
  d.type = T::kDropout;
  d.name = "d";
  nn::LayerDesc r;
  r.type = T::kGelu;
  r.name = "g";
  nn::LayerDesc a;
  a.type = T::kAdd;
  a.from = "c";
  s.layers = {c, d, r, a};
  const nn::Graph g = nn::build_graph(s);
  REQUIRE(g.nodes.size() == 4);
  const std::vector<std::size_t> last = nn::last_uses(g);
  CHECK(last[0] == 3);  // c: read by the dropout and by the add
  CHECK(last[1] == 2);  // d: read by the gelu
  CHECK(last[2] == 3);  // g: read by the add
  CHECK(last[3] == 4);  // the logits
}
