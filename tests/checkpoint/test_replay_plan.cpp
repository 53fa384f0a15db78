// SPDX-License-Identifier: MIT
// The replay computes only what backward reads (NOTE [replay only what backward needs] in
// core/segment.hpp): ops whose outputs nothing reads are recorded without running, an op the
// function reads on the host is computed, an op made of ops can be skipped whole, and reading a
// skipped output's values is an error, never garbage. Gradients stay the plain run's bit for bit.

#include <cstring>

#include <remat/remat.hpp>

#include "support/catch.hpp"

using namespace remat;
using T = Tensor<Cpu>;

namespace {

int g_forwards = 0;  // CountOp's and AffineOfOps's forward calls

// The state of an op whose backward reads nothing saved.
template <class B>
struct NoState {
  template <class F> void each(F) const {}
};

// y = 2 x, counted.  dx += 2 dy: backward reads nothing saved, and `save` rebuilds nothing.
struct CountOp {
  static constexpr const char* name = "count";
  template <class B>
  using Saved = NoState<B>;
  template <class B>
  static Tensor<B> forward(Saved<B>&, const Tensor<B>& x) {
    ++g_forwards;
    Tensor<B> y = new_tensor_like(x);
    const float* px = x.template data<float>();
    float* py = y.template data<float>();
    for (std::int64_t i = 0; i < x.numel(); ++i) py[i] = 2.0f * px[i];
    return y;
  }
  template <class B>
  static void save(Saved<B>&, const Tensor<B>&, const Tensor<B>&) {}
  template <class B>
  static void backward(const Saved<B>&, const Tensor<B>& dy, std::vector<Tensor<B>>& dx) {
    if (!dx[0].defined()) return;
    float* g = dx[0].template data<float>();
    const float* d = dy.template data<float>();
    for (std::int64_t i = 0; i < dy.numel(); ++i) g[i] += 2.0f * d[i];
  }
};

// y = 3 x + 1, made of ops (unrecorded inside), with a `save`: skippable as one op.
struct AffineOfOps {
  static constexpr const char* name = "affine_of_ops";
  template <class B>
  using Saved = NoState<B>;
  template <class B>
  static Tensor<B> forward(Saved<B>&, const Tensor<B>& x) {
    ++g_forwards;
    return x * 3.0f + 1.0f;
  }
  template <class B>
  static void save(Saved<B>&, const Tensor<B>&, const Tensor<B>&) {}
  template <class B>
  static void backward(const Saved<B>&, const Tensor<B>& dy, std::vector<Tensor<B>>& dx) {
    add_grad(dx[0], dy * 3.0f);
  }
};

std::vector<float> grad_after(Tape<Cpu>& tape, const T& w, const T& x,
                              const std::function<T(const T&)>& fn, bool ck,
                              const char* name = "seg") {
  w.clear_grad();
  const T y = ck ? checkpoint(CheckpointOptions{}.name(name), fn, x) : fn(x);
  tape.backward(sum(y * y));
  return w.grad().to_vector();
}

}  // namespace

TEST_CASE("the replay skips ops whose outputs nothing reads", "[checkpoint][replay]") {
  Tape<Cpu> tape(3);
  const T w = tape.randn({8, 8}, 0.3f, 1, true, Category::parameters);
  const T x = tape.randn({4, 8}, 1.0f, 2, true);
  // matmul (saves x and w), count (saves nothing), the residual add (saves nothing): backward
  // reads none of count's or the add's outputs, nor the matmul's.
  auto fn = [&](const T& in) { return in + apply_op<CountOp>(matmul(in, w)); };
  const auto plain = grad_after(tape, w, x, fn, false);
  g_forwards = 0;
  const auto ck = grad_after(tape, w, x, fn, true);
  CHECK(std::memcmp(plain.data(), ck.data(), plain.size() * sizeof(float)) == 0);
  CHECK(g_forwards == 1);  // the first run only
  const SegmentStats* st = tape.find_segment_stats("seg");
  REQUIRE(st != nullptr);
  CHECK(st->skipped_ops == 3);
  CHECK(st->remat_bytes == 0);
  CHECK_THAT(segment_table(tape), REMAT_CONTAINS("skipped"));

  SECTION("an output the function reads on the host is computed in the replay") {
    float seen = 0.0f;
    auto logs = [&](const T& in) {
      const T c = apply_op<CountOp>(matmul(in, w));
      seen = sum(c).item();  // a log line inside the block
      return in + c;
    };
    const auto with_log = grad_after(tape, w, x, logs, true, "logs");
    CHECK(std::memcmp(plain.data(), with_log.data(), plain.size() * sizeof(float)) == 0);
    CHECK(g_forwards == 3);  // the first run and the replay
    CHECK(seen != 0.0f);
  }
  SECTION("an op made of ops is skipped whole") {
    auto composed = [&](const T& in) { return in + apply_op<AffineOfOps>(matmul(in, w)); };
    const auto p = grad_after(tape, w, x, composed, false);
    g_forwards = 0;
    const auto c = grad_after(tape, w, x, composed, true, "composed");
    CHECK(std::memcmp(p.data(), c.data(), p.size() * sizeof(float)) == 0);
    CHECK(g_forwards == 1);
    REQUIRE(tape.find_segment_stats("composed") != nullptr);
    CHECK(tape.find_segment_stats("composed")->skipped_ops == 3);
  }
  SECTION("values verified: every op is computed") {
    g_forwards = 0;
    w.clear_grad();
    const T y = checkpoint(CheckpointOptions{}.name("verified").verify_values(true), fn, x);
    tape.backward(sum(y * y));
    CHECK(g_forwards == 2);
    REQUIRE(tape.find_segment_stats("verified") != nullptr);
    CHECK(tape.find_segment_stats("verified")->skipped_ops == 0);
  }
}

TEST_CASE("a skipped output's values cannot be read", "[checkpoint][replay][errors]") {
  Tape<Cpu> tape(3);
  const T w = tape.randn({8, 8}, 0.3f, 1, true, Category::parameters);
  const T x = tape.randn({4, 8}, 1.0f, 2, true);
  int calls = 0;
  auto fn = [&](const T& in) {
    const T c = apply_op<CountOp>(matmul(in, w));
    if (++calls == 2) (void)c.data<float>()[0];  // a raw read, in the replay only
    return in + c;
  };
  const T y = checkpoint(CheckpointOptions{}.name("raw"), fn, x);
  REQUIRE_THROWS_WITH(tape.backward(sum(y * y)),
                      REMAT_CONTAINS("was made by an op that a checkpoint replay did not compute"));
}

TEST_CASE("a product saved through a view of it is kept by save_linear", "[checkpoint][replay]") {
  Tape<Cpu> tape(3);
  const T w = tape.randn({8, 8}, 0.3f, 1, true, Category::parameters);
  const T x = tape.randn({4, 8}, 1.0f, 2, true);
  // SiLU saves its input: a reshape (a view) of the product, so the plain run keeps the
  // product's buffer, and keeping the product costs nothing more.
  auto fn = [&](const T& in) { return silu(reshape(matmul(in, w), {2, 2, 8})); };
  w.clear_grad();
  tape.backward(sum(fn(x)));
  const auto plain = w.grad().to_vector();
  w.clear_grad();
  const T y = checkpoint(CheckpointOptions{}.name("view").policy(policy::save_linear()), fn, x);
  tape.backward(sum(y));
  const auto ck = w.grad().to_vector();
  CHECK(std::memcmp(plain.data(), ck.data(), plain.size() * sizeof(float)) == 0);
  const SegmentStats* st = tape.find_segment_stats("view");
  REQUIRE(st != nullptr);
  CHECK(st->kept_bytes == 4 * 8 * 4);  // the product, through its view
  CHECK(st->remat_bytes == 0);         // the view is made again, nothing is computed
  CHECK(st->skipped_ops == 1);         // SiLU: only the gradient reads its output
}
