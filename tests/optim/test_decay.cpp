// SPDX-License-Identifier: MIT
// Weight decay on the matrices only (optim::DecayOn::matrices, issue 26 item 6): a matrix is
// updated exactly as with decay on everything, a vector exactly as with no decay, for AdamW and
// SGD with momentum, over several steps.

#include <remat/remat.hpp>

#include "support/catch.hpp"

using namespace remat;

namespace {

// Three steps of `Opt` on a (3, 5) matrix and a (5,) vector from fixed values, with the
// gradients of sum(w * k1) + sum(b * k2) * step; returns {matrix, vector} after.
template <class MakeOpt>
std::pair<std::vector<float>, std::vector<float>> decay_run(MakeOpt make) {
  Tape<Cpu> tape(5);
  const Tensor<Cpu> w = tape.randn({3, 5}, 1.0f, 1, true, Category::parameters);
  const Tensor<Cpu> b = tape.randn({5}, 1.0f, 2, true, Category::parameters);
  const Tensor<Cpu> k1 = tape.randn({3, 5}, 1.0f, 3), k2 = tape.randn({5}, 1.0f, 4);
  auto opt = make(std::vector<Tensor<Cpu>>{w, b});
  for (int step = 1; step <= 3; ++step) {
    tape.backward((sum(w * k1) + sum(b * k2)) * static_cast<float>(step));
    opt.step();
    opt.zero_grad();
  }
  return {w.to_vector(), b.to_vector()};
}

}  // namespace

TEST_CASE("weight decay on the matrices only: matrices as decay-all, vectors as no decay",
          "[optim][decay]") {
  CHECK(optim::decays(optim::DecayOn::matrices, Shape{3, 5}));
  CHECK(optim::decays(optim::DecayOn::matrices, Shape{2, 3, 5}));
  CHECK_FALSE(optim::decays(optim::DecayOn::matrices, Shape{5}));
  CHECK(optim::decays(optim::DecayOn::all, Shape{5}));
  auto adamw = [](float wd, optim::DecayOn on) {
    return [=](std::vector<Tensor<Cpu>> ps) {
      return optim::AdamW<Cpu>(ps, {0.1f, 0.9f, 0.999f, 1e-8f, wd, on});
    };
  };
  auto sgd = [](float wd, optim::DecayOn on) {
    return [=](std::vector<Tensor<Cpu>> ps) {
      return optim::SGD<Cpu>(ps, {0.1f, 0.9f, wd, false, on});
    };
  };
  for (int which = 0; which < 2; ++which) {
    INFO((which == 0 ? "AdamW" : "SGD with momentum"));
    auto run = [&](float wd, optim::DecayOn on) {
      return which == 0 ? decay_run(adamw(wd, on)) : decay_run(sgd(wd, on));
    };
    const auto all = run(0.5f, optim::DecayOn::all);
    const auto none = run(0.0f, optim::DecayOn::all);
    const auto matrices = run(0.5f, optim::DecayOn::matrices);
    CHECK(all.first != none.first);  // the decay is large enough to show
    CHECK(all.second != none.second);
    CHECK(matrices.first == all.first);    // the matrix: decayed, bit for bit
    CHECK(matrices.second == none.second);  // the vector: not decayed, bit for bit
  }
}
