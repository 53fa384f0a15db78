#pragma once
// SPDX-License-Identifier: MIT
// Embedding lookup: rows of a table gathered by integer ids; backward scatter-adds.

#include <array>

#include "remat/core/apply.hpp"

namespace remat {

// y[i, :] = w[ids[i], :].   dw[ids[i], :] += dy[i, :], summed in the order of i on every
// backend (deterministic: no atomics; CPU and CUDA give the same bits); a fresh dw is zeroed
// by the backward itself (rows no id names get 0)
struct EmbeddingOp {
  static constexpr const char* name = "embedding";
  template <class B>
  struct Saved {
    std::int64_t n = 0, V = 0, C = 0;
    Tensor<B> ids;
    template <class F> void each(F f) const { f(ids); }
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& w, const Tensor<B>& ids) {
    detail::check_f32(name, "table", w);
    REMAT_CHECK(w.rank() == 2, "remat::embedding: table is ", w.shape().str(),
                " (expected [rows, C])");
    REMAT_CHECK(ids.dtype() == DType::i32, "remat::embedding: ids must be i32, found ",
                dtype_name(ids.dtype()), " (hint: make them with tape.tokens)");
    detail::check_nonempty(name, "ids", ids);
    const std::int64_t n = ids.numel(), C = w.size(1);
    const auto [lo, hi] = detail::int_range(ids);
    REMAT_CHECK(lo >= 0 && hi < w.size(0), "remat::embedding: id ", (lo < 0 ? lo : hi),
                " is out of range for a table of ", w.size(0), " rows (expected 0 <= id < ",
                w.size(0), "; is the vocabulary too small for the data?)");
    Shape out = ids.shape();
    out.push_back(C);
    auto y = detail::make_tensor<B>(&w.tape(), out);
    B::embedding_forward(y.template data<float>(), w.template data<float>(),
                         ids.template data<std::int32_t>(), n, C);
    save(s, y, w, ids);
    return y;
  }
  template <class B>
  static void save(Saved<B>& s, const Tensor<B>&, const Tensor<B>& w, const Tensor<B>& ids) {
    s.n = ids.numel();
    s.V = w.size(0);
    s.C = w.size(1);
    s.ids = ids;
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp,
                       const std::vector<char>& fresh) {  // NOTE [fresh gradient buffers]
    B::embedding_backward(dinp[0].template data<float>(), dout.template data<float>(),
                          s.ids.template data<std::int32_t>(), s.n, s.V, s.C,
                          detail::fresh_at(fresh, 0));
  }
};

/// Rows of `table` (rows, C) picked by integer `ids` (...) -> (..., C).
template <class B> Tensor<B> embedding(const Tensor<B>& table, const Tensor<B>& ids) {
  return detail::apply<EmbeddingOp>(std::array<Tensor<B>, 2>{table, ids});
}

}  // namespace remat
