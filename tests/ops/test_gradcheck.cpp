// SPDX-License-Identifier: MIT
// Every op's backward against finite differences: one line per op and shape, including
// broadcasting and batched cases.

#include "support/gradcheck.hpp"

using namespace remat;
using remat_test::gradcheck;
using remat_test::param;
using remat_test::T;
using V = std::vector<T>;

TEST_CASE("elementwise ops match finite differences, with trailing broadcast", "[ops][grad]") {
  Tape<Cpu> tape;
  auto a = param(tape, {3, 4, 5}, 1), b = param(tape, {3, 4, 5}, 2), bias = param(tape, {5}, 3);
  auto row = param(tape, {4, 5}, 4), pos = param(tape, {3, 4, 5}, 5, 0.3f, 2.0f);  // pos: away from 0
  gradcheck(tape, [](const V& x) { return x[0] + x[1]; }, {a, b});
  gradcheck(tape, [](const V& x) { return x[0] - x[1]; }, {a, b});
  gradcheck(tape, [](const V& x) { return x[0] * x[1]; }, {a, b});
  gradcheck(tape, [](const V& x) { return x[0] / x[1]; }, {a, pos});
  gradcheck(tape, [](const V& x) { return x[0] + x[1]; }, {a, bias});    // bias broadcast
  gradcheck(tape, [](const V& x) { return x[1] - x[0]; }, {a, bias});    // smaller on the left
  gradcheck(tape, [](const V& x) { return x[0] * x[1]; }, {a, row});     // 2-D suffix
  gradcheck(tape, [](const V& x) { return x[1] / x[0]; }, {pos, bias});
  gradcheck(tape, [](const V& x) { return x[0] * x[0]; }, {a});          // same tensor twice
  gradcheck(tape, [](const V& x) { return 2.5f * x[0] - 1.0f; }, {a});
  gradcheck(tape, [](const V& x) { return 1.0f - x[0] / 4.0f; }, {a});
  gradcheck(tape, [](const V& x) { return -x[0]; }, {a});
}

TEST_CASE("ops with operands that need no gradient: the others' gradients match finite "
          "differences", "[ops][grad]") {
  // Each operand in turn is a constant (no gradient): a backward that wrote into the missing
  // gradient, or read it, or mixed up which one is missing, fails here.
  Tape<Cpu> tape;
  auto a = param(tape, {3, 4, 5}, 11), b = param(tape, {3, 4, 5}, 12, 0.3f, 2.0f);
  auto row = param(tape, {4, 5}, 13, 0.3f, 2.0f);
  const auto konst = [](const T& t) { return detach(t); };
  for (int which = 0; which < 2; ++which) {
    INFO("operand " << which << " is a constant");
    const auto two = [&](const T& x, const T& y) { return which == 0 ? V{konst(x), y} : V{x, konst(y)}; };
    gradcheck(tape, [](const V& x) { return x[0] * x[1]; }, two(a, b));
    gradcheck(tape, [](const V& x) { return x[0] / x[1]; }, two(a, b));
    gradcheck(tape, [](const V& x) { return x[0] - x[1]; }, two(a, b));
    gradcheck(tape, [](const V& x) { return x[0] * x[1]; }, two(a, row));  // broadcast
    gradcheck(tape, [](const V& x) { return x[1] / x[0]; }, two(b, row));
    auto m = param(tape, {3, 4}, 14), n = param(tape, {4, 5}, 15);
    gradcheck(tape, [](const V& x) { return matmul(x[0], x[1]); }, two(m, n));
    auto x3 = param(tape, {2, 3, 4}, 16), w3 = param(tape, {4, 5}, 17), b3 = param(tape, {5}, 18);
    gradcheck(tape, [](const V& v) { return linear(v[0], v[1], v[2]); },
              which == 0 ? V{konst(x3), w3, b3} : V{x3, konst(w3), b3});
    auto lx = param(tape, {2, 3, 8}, 19), lw = param(tape, {8}, 20, 0.5f, 1.0f), lb = param(tape, {8}, 21);
    gradcheck(tape, [](const V& v) { return layer_norm(v[0], v[1], v[2]); },
              which == 0 ? V{konst(lx), lw, lb} : V{lx, konst(lw), konst(lb)});
  }
  auto q = param(tape, {2, 2, 5, 4}, 22), k = param(tape, {2, 2, 5, 4}, 23), v = param(tape, {2, 2, 5, 4}, 24);
  for (int c = 0; c < 3; ++c) {  // one of q, k, v constant
    V in{q, k, v};
    in[static_cast<std::size_t>(c)] = konst(in[static_cast<std::size_t>(c)]);
    gradcheck(tape, [](const V& x) { return attention(x[0], x[1], x[2], true); }, in);
  }
  gradcheck(tape, [](const V& x) { return concat(V{x[0], x[1]}, 1); },
            V{konst(param(tape, {2, 3, 4}, 25)), param(tape, {2, 5, 4}, 26)});
}

TEST_CASE("matmul matches finite differences: 2-D, batched, shared and transposed",
          "[ops][grad]") {
  Tape<Cpu> tape;
  auto a = param(tape, {3, 4}, 1), b = param(tape, {4, 5}, 2);
  auto at = param(tape, {4, 3}, 3), bt = param(tape, {5, 4}, 4);
  auto ba = param(tape, {2, 3, 4}, 5), bb = param(tape, {2, 4, 5}, 6), bat = param(tape, {2, 4, 3}, 7);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      gradcheck(tape, [&](const V& x) { return matmul(x[0], x[1], ta, tb); },
                {ta ? at : a, tb ? bt : b});
      gradcheck(tape, [&](const V& x) { return matmul(x[0], x[1], ta, tb); },
                {ta ? bat : ba, tb ? bt : b});  // b shared by the batch
    }
  gradcheck(tape, [](const V& x) { return matmul(x[0], x[1]); }, {ba, bb});
  gradcheck(tape, [](const V& x) { return matmul(x[0], x[1], true, false); }, {bat, bb});
  auto q4 = param(tape, {2, 2, 3, 4}, 8), k4 = param(tape, {2, 2, 3, 4}, 9);
  gradcheck(tape, [](const V& x) { return matmul(x[0], x[1], false, true); }, {q4, k4});
}

TEST_CASE("linear matches finite differences", "[ops][grad]") {
  Tape<Cpu> tape;
  auto x = param(tape, {2, 3, 4}, 1), w = param(tape, {4, 5}, 2), b = param(tape, {5}, 3);
  gradcheck(tape, [](const V& v) { return linear(v[0], v[1], v[2]); }, {x, w, b});
  auto x2 = param(tape, {6, 4}, 4);
  gradcheck(tape, [](const V& v) { return linear(v[0], v[1], v[2]); }, {x2, w, b});
  // with the residual inside: r + x w + b; its gradient passes through, or is added where the
  // residual is also the input (x w + b + x: both gradients go into one buffer)
  auto r = param(tape, {2, 3, 5}, 5);
  gradcheck(tape, [](const V& v) { return linear(v[0], v[1], v[2], v[3]); }, {x, w, b, r});
  gradcheck(tape, [](const V& v) { return linear(v[0], v[1], v[2], v[3]) * v[3]; }, {x, w, b, r});
  auto sq = param(tape, {4, 4}, 6), b4 = param(tape, {4}, 7);
  gradcheck(tape, [](const V& v) { return linear(v[0], v[1], v[2], v[0]); }, {x, sq, b4});
}

TEST_CASE("mlp matches finite differences", "[ops][grad]") {
  Tape<Cpu> tape;
  auto x = param(tape, {2, 3, 4}, 1), w1 = param(tape, {4, 8}, 2), b1 = param(tape, {8}, 3);
  auto w2 = param(tape, {8, 4}, 4), b2 = param(tape, {4}, 5), r = param(tape, {2, 3, 4}, 6);
  gradcheck(tape, [](const V& v) { return mlp(v[0], v[1], v[2], v[3], v[4]); }, {x, w1, b1, w2, b2});
  gradcheck(tape, [](const V& v) { return mlp(v[0], v[1], v[2], v[3], v[4], v[5]); },
            {x, w1, b1, w2, b2, r});
  // the residual is also the input: its two gradients add into one buffer
  gradcheck(tape, [](const V& v) { return mlp(v[0], v[1], v[2], v[3], v[4], v[0]); }, {x, w1, b1, w2, b2});
  // an output width other than the input's, on rows without a batch
  auto x2 = param(tape, {5, 4}, 7), w3 = param(tape, {8, 3}, 8), b3 = param(tape, {3}, 9);
  gradcheck(tape, [](const V& v) { return mlp(v[0], v[1], v[2], v[3], v[4]); }, {x2, w1, b1, w3, b3});
}

TEST_CASE("mlp equals linear, gelu, linear, with frozen weights too", "[ops]") {
  for (const bool frozen : {false, true}) {
    INFO("frozen " << frozen);
    Tape<Cpu> tape;
    auto x = param(tape, {2, 3, 4}, 1), w1 = param(tape, {4, 8}, 2), b1 = param(tape, {8}, 3);
    auto w2 = param(tape, {8, 4}, 4), b2 = param(tape, {4}, 5), r = param(tape, {2, 3, 4}, 6);
    for (auto* w : {&w1, &b1, &w2, &b2}) w->set_requires_grad(!frozen);
    const V in = {x, w1, b1, w2, b2, r};
    std::vector<std::vector<float>> grads[2];
    std::vector<float> outs[2];
    for (int fused = 0; fused < 2; ++fused) {
      for (const auto& t : in) if (t.requires_grad()) t.clear_grad();
      auto y = fused ? mlp(x, w1, b1, w2, b2, r) : linear(gelu(linear(x, w1, b1)), w2, b2) + r;
      outs[fused] = y.to_vector();
      tape.backward(sum(mul(y, y)));
      for (const auto& t : in)
        if (t.requires_grad()) grads[fused].push_back(t.grad().to_vector());
    }
    REQUIRE(grads[0].size() == (frozen ? 2u : 6u));
    REQUIRE(grads[1].size() == grads[0].size());
    for (std::size_t i = 0; i < outs[0].size(); ++i) CHECK(outs[1][i] == Approx(outs[0][i]).margin(1e-5));
    for (std::size_t k = 0; k < grads[0].size(); ++k)
      for (std::size_t i = 0; i < grads[0][k].size(); ++i)
        CHECK(grads[1][k][i] == Approx(grads[0][k][i]).margin(1e-4));
  }
}

TEST_CASE("linear with a residual equals the residual added apart", "[ops]") {
  Tape<Cpu> tape;
  auto x = param(tape, {2, 3, 4}, 1), w = param(tape, {4, 5}, 2), b = param(tape, {5}, 3);
  auto r = param(tape, {2, 3, 5}, 5);
  const auto fused = linear(x, w, b, r).to_vector(), apart = (linear(x, w, b) + r).to_vector();
  REQUIRE(fused.size() == apart.size());
  for (std::size_t i = 0; i < fused.size(); ++i) CHECK(fused[i] == Approx(apart[i]).margin(1e-5));
}

TEST_CASE("reductions match finite differences", "[ops][grad]") {
  Tape<Cpu> tape;
  auto x = param(tape, {3, 4, 5}, 1);
  gradcheck(tape, [](const V& v) { return sum(v[0]); }, {x});
  gradcheck(tape, [](const V& v) { return mean(v[0]); }, {x});
  for (int axis : {0, 1, 2, -1}) {
    gradcheck(tape, [&](const V& v) { return sum(v[0], axis); }, {x});
    gradcheck(tape, [&](const V& v) { return mean(v[0], axis, true); }, {x});
  }
}

TEST_CASE("shape ops match finite differences", "[ops][grad]") {
  Tape<Cpu> tape;
  auto x = param(tape, {2, 3, 4}, 1), y = param(tape, {2, 5, 4}, 2);
  gradcheck(tape, [](const V& v) { return reshape(v[0], {6, -1}) * 2.0f; }, {x});
  gradcheck(tape, [](const V& v) { return transpose(v[0], 0, 2); }, {x});
  gradcheck(tape, [](const V& v) { return permute(v[0], {1, 2, 0}); }, {x});
  gradcheck(tape, [](const V& v) { return slice(v[0], 1, 1, 2); }, {x});
  gradcheck(tape, [](const V& v) { return slice(v[0], -1, 0, 3); }, {x});
  gradcheck(tape, [](const V& v) { auto p = split(v[0], 2, {1, 3}); return p[1] * 3.0f + sum(p[0]); }, {x});
  gradcheck(tape, [](const V& v) { return concat(V{v[0], v[1]}, 1); }, {x, y});
  gradcheck(tape, [](const V& v) { return concat(V{v[0], v[0]}, 0); }, {x});
}

TEST_CASE("activations match finite differences", "[ops][grad]") {
  Tape<Cpu> tape;
  auto x = param(tape, {4, 6}, 1, 2.0f);
  gradcheck(tape, [](const V& v) { return gelu(v[0]); }, {x});
  gradcheck(tape, [](const V& v) { return tanh(v[0]); }, {x});
  remat_test::GradcheckOptions kink;
  kink.kink = 0.05f;
  gradcheck(tape, [](const V& v) { return relu(v[0]); }, {x}, kink);
  gradcheck(tape, [](const V& v) { return softmax(v[0]); }, {x});
  auto x3 = param(tape, {2, 3, 7}, 2);
  gradcheck(tape, [](const V& v) { return softmax(v[0]); }, {x3});
}

TEST_CASE("layer norm matches finite differences", "[ops][grad]") {
  Tape<Cpu> tape;
  auto x = param(tape, {2, 3, 8}, 1), w = param(tape, {8}, 2, 0.5f, 1.0f), b = param(tape, {8}, 3);
  gradcheck(tape, [](const V& v) { return layer_norm(v[0], v[1], v[2]); }, {x, w, b});
  auto x2 = param(tape, {5, 16}, 4, 3.0f, 1.0f), w2 = param(tape, {16}, 5), b2 = param(tape, {16}, 6);
  gradcheck(tape, [](const V& v) { return layer_norm(v[0], v[1], v[2]); }, {x2, w2, b2});
}

TEST_CASE("embedding matches finite differences, repeated ids accumulate", "[ops][grad]") {
  Tape<Cpu> tape;
  auto w = param(tape, {6, 4}, 1);
  auto ids = tape.tokens({2, 3}, {0, 5, 2, 2, 5, 5});
  gradcheck(tape, [&](const V& v) { return embedding(v[0], ids); }, {w});
}

TEST_CASE("attention matches finite differences, causal and not", "[ops][grad]") {
  Tape<Cpu> tape;
  auto q = param(tape, {2, 2, 5, 4}, 1), k = param(tape, {2, 2, 5, 4}, 2), v = param(tape, {2, 2, 5, 4}, 3);
  gradcheck(tape, [](const V& x) { return attention(x[0], x[1], x[2], true); }, {q, k, v});
  gradcheck(tape, [](const V& x) { return attention(x[0], x[1], x[2], false); }, {q, k, v});
  auto q3 = param(tape, {7, 8}, 4), k3 = param(tape, {7, 8}, 5), v3 = param(tape, {7, 8}, 6);
  gradcheck(tape, [](const V& x) { return attention(x[0], x[1], x[2], true); }, {q3, k3, v3});
  // Longer than the CPU kernel's 64-row blocks: the causal limit falls inside later blocks.
  auto ql = param(tape, {1, 2, 150, 4}, 7), kl = param(tape, {1, 2, 150, 4}, 8), vl = param(tape, {1, 2, 150, 4}, 9);
  for (bool causal : {true, false})
    gradcheck(tape, [&](const V& x) { return attention(x[0], x[1], x[2], causal); }, {ql, kl, vl});
}

TEST_CASE("self-attention on a packed qkv matches finite differences and the unpacked op",
          "[ops][grad]") {
  Tape<Cpu> tape;
  auto qkv = param(tape, {2, 5, 3 * 6}, 1);  // B 2, T 5, C 6, 3 heads of 2
  gradcheck(tape, [](const V& x) { return self_attention(x[0], 3); }, {qkv});
  gradcheck(tape, [](const V& x) { return self_attention(x[0], 2, false); }, {qkv});
  auto big = param(tape, {1, 130, 3 * 8}, 2);  // past the 64-row blocks
  remat_test::GradcheckOptions o;
  o.max_elems = 24;
  gradcheck(tape, [](const V& x) { return self_attention(x[0], 2); }, {big}, o);
  // Same numbers as splitting into heads by hand and calling attention().
  NoGrad ng;
  auto heads = [&](int part) {
    return permute(reshape(slice(qkv, 2, 6 * part, 6), {2, 5, 3, 2}), {0, 2, 1, 3});
  };
  auto ref = reshape(permute(attention(heads(0), heads(1), heads(2)), {0, 2, 1, 3}), {2, 5, 6});
  const auto a = self_attention(qkv, 3).to_vector(), b = ref.to_vector();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).margin(1e-6));
}

TEST_CASE("cross-entropy matches finite differences", "[ops][grad]") {
  Tape<Cpu> tape;
  auto logits = param(tape, {2, 3, 7}, 1, 2.0f);
  auto targets = tape.tokens({2, 3}, {0, 6, 3, 3, 1, 2});
  gradcheck(tape, [&](const V& v) { return cross_entropy(v[0], targets); }, {logits});
  auto l2 = param(tape, {5, 11}, 2);
  auto t2 = tape.tokens({5}, {10, 0, 4, 4, 7});
  gradcheck(tape, [&](const V& v) { return cross_entropy(v[0], t2) * 3.0f; }, {l2});
}

TEST_CASE("cross-entropy over the first classes of padded rows", "[ops][grad]") {
  // rows of 9 logits, the first 7 classes: finite differences see no effect of the last two
  // columns, so their gradient must be 0; both through a leaf (its buffer fresh) and written
  // over an intermediate's logits (lg * 2, the tape's grad_over_saved), and accumulated
  Tape<Cpu> tape;
  auto logits = param(tape, {2, 3, 9}, 3, 2.0f);
  auto targets = tape.tokens({2, 3}, {0, 6, 3, 3, 1, 2});
  gradcheck(tape, [&](const V& v) { return cross_entropy(v[0], targets, 7); }, {logits});
  gradcheck(tape, [&](const V& v) { return cross_entropy(v[0] * 2.0f, targets, 7); }, {logits});
  gradcheck(tape, [&](const V& v) { return cross_entropy(v[0], targets, 7) + sum(v[0] * v[0]); },
            {logits});
  // the same bits as the unpadded loss on the first 7 columns, the padding's gradient exactly 0
  auto pad = param(tape, {6, 9}, 4, 2.0f);
  auto t6 = tape.tokens({6}, {0, 6, 3, 3, 1, 2});
  auto loss = cross_entropy(pad, t6, 7);
  tape.backward(loss);
  const auto g = pad.grad().to_vector();
  auto cut = detach(slice(pad, 1, 0, 7));
  cut.set_requires_grad(true);
  auto ref = cross_entropy(cut, t6);
  tape.backward(ref);
  CHECK(loss.item() == ref.item());
  const auto gr = cut.grad().to_vector();
  for (std::size_t r = 0; r < 6; ++r)
    for (std::size_t j = 0; j < 9; ++j)
      CHECK(g[r * 9 + j] == (j < 7 ? gr[r * 7 + j] : 0.0f));
}

TEST_CASE("dropout matches finite differences with its regenerated mask", "[ops][grad]") {
  Tape<Cpu> tape;
  auto x = param(tape, {4, 8}, 1);
  gradcheck(tape, [](const V& v) { return dropout(v[0], 0.3f); }, {x});
  gradcheck(tape, [](const V& v) { return gelu(dropout(v[0], 0.5f)) * v[0]; }, {x});
}

TEST_CASE("the CPU kernels agree with the shared scalar formulas of core/math.hpp", "[ops]") {
  // The GPU kernels use math::gelu, math::gelu_grad and math::binary*; the CPU vectorizes them
  // through Eigen. Both must be the same functions.
  std::vector<float> x(401), y(401), d(401, 0.0f), ones(401, 1.0f);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = -6.0f + 0.03f * static_cast<float>(i);
  Cpu::gelu_forward(y.data(), x.data(), 401);
  Cpu::gelu_backward(d.data(), x.data(), ones.data(), 401);
  for (std::size_t i = 0; i < x.size(); ++i) {
    CHECK(y[i] == Approx(math::gelu(x[i])).margin(1e-6));
    // Eigen's vectorized tanh saturates to +-1 a little earlier than std::tanh (|x| > 5):
    // the tails then differ by about 2e-6.
    CHECK(d[i] == Approx(math::gelu_grad(x[i])).margin(5e-6));
  }
  // 17 elements: more than one 8-wide vector, so GCC's bounds analysis has nothing to flag
  std::vector<float> a(17), b(17), g(17);
  for (std::size_t i = 0; i < 17; ++i) {
    a[i] = 0.7f * static_cast<float>(i) - 5.0f;
    b[i] = 0.5f + 0.25f * static_cast<float>(i);
    g[i] = 1.0f - 0.1f * static_cast<float>(i);
  }
  for (auto k : {math::BinaryKind::add, math::BinaryKind::sub, math::BinaryKind::mul, math::BinaryKind::div}) {
    std::vector<float> out(17), da(17, 0.0f), db(17, 0.0f);
    Cpu::binary_forward(k, out.data(), a.data(), b.data(), 1, 17, false, false);
    Cpu::binary_backward(k, da.data(), db.data(), g.data(), a.data(), b.data(), 1, 17, false, false);
    for (std::size_t i = 0; i < 17; ++i) {
      CHECK(out[i] == Approx(math::binary(k, a[i], b[i])));
      CHECK(da[i] == Approx(g[i] * math::binary_grad_a(k, a[i], b[i])));
      CHECK(db[i] == Approx(g[i] * math::binary_grad_b(k, a[i], b[i])));
    }
  }
}

TEST_CASE("the CPU's fused and materialized attention paths agree; fused keeps B H T floats",
          "[ops][grad]") {
  // NOTE [CPU attention paths]: fused keeps each row's lse and recomputes P in backward.
  struct Result {
    std::vector<float> o, dq, dk, dv;
    std::int64_t saved = 0;  // activation bytes live after the forward, beyond q, k, v
  };
  auto run = [](cpu::AttentionPath path, bool causal) {
    Cpu::set_attention_path(path);
    Tape<Cpu> tape;
    auto q = param(tape, {2, 3, 150, 8}, 11), k = param(tape, {2, 3, 150, 8}, 12),
         v = param(tape, {2, 3, 150, 8}, 13), w = param(tape, {2, 3, 150, 8}, 14);
    const std::int64_t live = memory_stats<Cpu>().live_of(Category::activations);
    auto o = attention(q, k, v, causal);
    Result r;
    r.saved = memory_stats<Cpu>().live_of(Category::activations) - live;
    tape.backward(mean(o * w));
    r.o = o.to_vector();
    r.dq = q.grad().to_vector();
    r.dk = k.grad().to_vector();
    r.dv = v.grad().to_vector();
    Cpu::set_attention_path(cpu::AttentionPath::from_env);
    return r;
  };
  const std::int64_t BH = 6, T = 150;
  for (bool causal : {true, false}) {
    INFO("causal " << causal);
    const Result f = run(cpu::AttentionPath::fused, causal), m = run(cpu::AttentionPath::materialized, causal);
    CHECK(m.saved - f.saved == BH * T * T * 4 - BH * T * 4);  // P (B H T T) against lse (B H T)
    for (const auto& [a, b] : {std::pair{&f.o, &m.o}, {&f.dq, &m.dq}, {&f.dk, &m.dk}, {&f.dv, &m.dv}}) {
      REQUIRE(a->size() == b->size());
      float worst = 0.0f, scale = 0.0f;
      for (std::size_t i = 0; i < a->size(); ++i) {
        worst = std::max(worst, std::abs((*a)[i] - (*b)[i]));
        scale = std::max(scale, std::abs((*b)[i]));
      }
      CHECK(worst <= 1e-5f * scale);
    }
    const Result again = run(cpu::AttentionPath::fused, causal);  // deterministic, bit for bit
    CHECK(again.o == f.o);
    CHECK(again.dq == f.dq);
    CHECK(again.dk == f.dk);
    CHECK(again.dv == f.dv);
  }
  // The materialized path against finite differences too (the default, fused, has the cases above).
  Cpu::set_attention_path(cpu::AttentionPath::materialized);
  Tape<Cpu> tape;
  auto ql = param(tape, {1, 2, 150, 4}, 7), kl = param(tape, {1, 2, 150, 4}, 8), vl = param(tape, {1, 2, 150, 4}, 9);
  for (bool causal : {true, false})
    gradcheck(tape, [&](const V& x) { return attention(x[0], x[1], x[2], causal); }, {ql, kl, vl});
  Cpu::set_attention_path(cpu::AttentionPath::from_env);
}
