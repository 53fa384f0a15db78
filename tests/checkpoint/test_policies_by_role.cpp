// SPDX-License-Identifier: MIT
// Checkpoint policies decide by what an op is, not by which module made it (issue 26): on a
// Llama-style block written from primitives (no nn::Linear: weights as parameters and
// matmul; RMSNorm composed; heads split and merged with permute), each policy gives the plain
// run's gradients bit for bit, save_linear keeps exactly the products with a weight that
// backward reads, and no policy keeps more than the plain run.

#include <remat/remat.hpp>

#include "support/catch.hpp"

using namespace remat;
using T = Tensor<Cpu>;

namespace {

struct LlamaBlock {
  std::int64_t C, H, F;
  T g1, wq, wk, wv, wo, g2, w1, w3, w2;
  LlamaBlock(Tape<Cpu>& t, std::int64_t c, std::int64_t h, std::int64_t f)
      : C(c), H(h), F(f), g1(t.ones({c}, true, Category::parameters)),
        wq(t.randn({c, c}, 0.2f, 1, true, Category::parameters)),
        wk(t.randn({c, c}, 0.2f, 2, true, Category::parameters)),
        wv(t.randn({c, c}, 0.2f, 3, true, Category::parameters)),
        wo(t.randn({c, c}, 0.2f, 4, true, Category::parameters)),
        g2(t.ones({c}, true, Category::parameters)),
        w1(t.randn({c, f}, 0.2f, 5, true, Category::parameters)),
        w3(t.randn({c, f}, 0.2f, 6, true, Category::parameters)),
        w2(t.randn({f, c}, 0.2f, 7, true, Category::parameters)) {}
  std::vector<T> params() const { return {g1, wq, wk, wv, wo, g2, w1, w3, w2}; }
  static T rms_norm(const T& x, const T& g) {
    return x * rsqrt(mean(square(x), -1, true) + 1e-5f) * g;
  }
  T heads(const T& x) const {  // (B, T, C) -> (B, H, T, D)
    return permute(reshape(x, {x.shape()[0], x.shape()[1], H, C / H}), {0, 2, 1, 3});
  }
  T operator()(const T& x) const {
    const T h = rms_norm(x, g1);
    const T a = attention(heads(matmul(h, wq)), heads(matmul(h, wk)), heads(matmul(h, wv)), true);
    const T merged = reshape(permute(a, {0, 2, 1, 3}), x.shape());
    const T x2 = x + matmul(merged, wo);
    const T h2 = rms_norm(x2, g2);
    return x2 + matmul(silu(matmul(h2, w1)) * matmul(h2, w3), w2);
  }
};

std::vector<std::vector<float>> watched_grads(const std::vector<T>& ps) {
  std::vector<std::vector<float>> g;
  for (const T& p : ps) {
    g.push_back(p.grad().to_vector());
    p.clear_grad();
  }
  return g;
}

}  // namespace

TEST_CASE("policies decide by role on a Llama-style block written from primitives",
          "[checkpoint][policy]") {
  const std::int64_t B = 2, Tn = 12, C = 16, H = 4, F = 24;
  Tape<Cpu> tape(7);
  const LlamaBlock blk(tape, C, H, F);
  const T x = tape.randn({B, Tn, C}, 1.0f, 8, true);
  std::vector<T> watch = blk.params();
  watch.push_back(x);
  tape.backward(sum(blk(x)));
  const auto plain = watched_grads(watch);

  const std::int64_t f4 = 4;  // bytes of a float
  // The products with a weight whose outputs backward reads: w1's (SiLU reads it) and w3's (the
  // gate's product reads it). q, k and v feed the head split (a copy), wo and w2 a residual add:
  // a plain run keeps none of those five, so no policy does.
  const std::int64_t weight_products = f4 * 2 * B * Tn * F;
  // The attention core's state beyond q, k and v: its log-sum-exp (B H T; the CPU's backward
  // does not read its output).
  const std::int64_t attention_state = f4 * B * H * Tn;
  for (const Policy& pol : {policy::recompute_all(), policy::save_linear(), policy::save_matmuls(),
                            policy::save_all_but_attention(), policy::megatron_selective()}) {
    INFO(pol.name);
    const T y = checkpoint(CheckpointOptions{}.name(pol.name).policy(pol),
                           [&](const T& in) { return blk(in); }, x);
    tape.backward(sum(y));
    CHECK(watched_grads(watch) == plain);
    const SegmentStats* st = nullptr;
    for (const auto& s : tape.segment_stats())
      if (s.name == pol.name) st = &s;
    REQUIRE(st != nullptr);
    CHECK(st->freed_bytes > 0);
    // Never more than the plain run: what it keeps plus its boundary input (which the plain
    // run's first norm saves too).
    CHECK(st->kept_bytes + st->boundary_bytes <= st->freed_bytes);
    if (pol.name == "recompute_all") CHECK(st->kept_bytes == 0);
    // save_linear finds the linear layers by what they are: a matmul with a parameter. Before
    // (by class, nn::Linear only) it kept nothing here.
    if (pol.name == "save_linear") CHECK(st->kept_bytes == weight_products);
    // save_matmuls keeps every product backward reads: the same two here. (The norms' (B, T, 1)
    // scales enter their products as columns, NOTE [broadcasting]: no product with a row of
    // ones expands them, whose outputs this policy kept before.)
    if (pol.name == "save_matmuls") CHECK(st->kept_bytes == weight_products);
    // The other two keep everything the plain run keeps but the attention core's state (this
    // model has no layer_norm op, so they coincide), and recompute only the core.
    if (pol.name == "save_all_but_attention" || pol.name == "megatron_selective") {
      CHECK(st->kept_bytes + st->boundary_bytes + attention_state == st->freed_bytes);
      CHECK(st->remat_bytes == f4 * B * Tn * C);  // the core's output
    }
    // The replay skips what nothing reads: the last residual add and the w2 product below it
    // (their outputs only carry the gradient), and more when a policy keeps their consumers.
    CHECK(st->skipped_ops >= 2);
    std::printf("  %-24s kept %7lld B, the plain run saves %7lld B, recomputed %7lld B, "
                "skipped %lld ops\n",
                pol.name.c_str(), static_cast<long long>(st->kept_bytes),
                static_cast<long long>(st->freed_bytes), static_cast<long long>(st->remat_bytes),
                static_cast<long long>(st->skipped_ops));
  }
  // megatron_selective keeps all but the attention core, copies included (a copy the plain
  // run keeps is its only copy: the product it was made from is not kept).
  const Policy mg = policy::megatron_selective();
  const Shape s{2, 3};
  for (const char* op : {"attention", "self_attention", "grouped_attention"})
    CHECK_FALSE(mg.keep_op(OpInfo{op, 0, &s, 24, true, false}));
  for (const char* op : {"matmul", "linear", "unary", "binary", "layer_norm", "reduce", "permute"})
    CHECK(mg.keep_op(OpInfo{op, 0, &s, 24, true, false}));
  const Policy sl = policy::save_linear();
  CHECK(sl.keep_op(OpInfo{"matmul", 0, &s, 24, true, true}));
  CHECK_FALSE(sl.keep_op(OpInfo{"matmul", 0, &s, 24, true, false}));  // q k^T: no weight
}
