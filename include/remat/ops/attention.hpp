#pragma once
// SPDX-License-Identifier: MIT
// Scaled dot-product attention: over (..., T, D) tensors (attention), fused for GPT over a
// packed qkv (B, T, 3C) -> (B, T, C) (self_attention: no split, no head transposes, no copies),
// and with grouped key/value heads over (B, T, heads, D) (grouped_attention, Llama's).
// The backend decides what is kept for backward (aux): each query row's log-sum-exp (B H T
// floats; the CPU's and CUDA's fused paths, which recompute P in backward) or the
// probabilities P (B H T T floats; their materialized paths). q, k, v (qkv) f32 or bf16, the
// output of their type; bf16 by widening (NOTE [bf16 by widening] in ops/cast.hpp), aux f32.

#include <array>
#include <cmath>

#include "remat/core/apply.hpp"
#include "remat/core/math.hpp"
#include "remat/ops/cast.hpp"

namespace remat {

// o = P v,  P = softmax(q k^T / sqrt(D)) over keys, with keys j > i masked when causal.
//   dv = P^T do;  dP = do v^T;  dS = P (dP - sum_j dP P);  dq = dS k / sqrt(D);  dk = dS^T q / sqrt(D)
struct AttentionOp {
  static constexpr const char* name = "attention";
  template <class B>
  struct Saved {
    AttentionLayout L;
    float scale = 1.0f;
    bool causal = true;
    Tensor<B> q, k, v, aux, o;  // aux: the backend's statistics (P on the CPU, lse on CUDA);
                                // o: the output, when the backend's backward reads it
    template <class F> void each(F f) const { f(q); f(k); f(v); f(aux); f(o); }
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& q, const Tensor<B>& k,
                           const Tensor<B>& v, bool causal) {
    check_types(name, q, k, v);
    REMAT_CHECK(q.rank() >= 2 && q.shape() == k.shape() && q.shape() == v.shape(),
                "remat::attention: q is ", q.shape().str(), ", k is ", k.shape().str(), ", v is ",
                v.shape().str(), " (expected three equal shapes (..., T, D), e.g. [B, H, T, D])");
    detail::check_nonempty(name, "q", q);
    AttentionLayout& L = s.L;
    L.T = q.shape()[-2];
    L.D = q.shape()[-1];
    L.B = q.numel() / (L.T * L.D);  // every leading dimension: one (batch, head) each
    L.H = 1;
    L.q_batch = L.o_batch = L.T * L.D;
    L.q_row = L.o_row = L.D;
    L.kv_like_q();
    return run(s, q, k, v, causal);
  }
  // q, k and v all f32 or all bf16 (op: the op's name, for errors; shared with GroupedAttentionOp)
  template <class B>
  static void check_types(const char* op, const Tensor<B>& q, const Tensor<B>& k, const Tensor<B>& v) {
    for (const Tensor<B>* t : {&q, &k, &v}) detail::check_float(op, "q, k and v", *t);
    REMAT_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), "remat::", op, ": q is ",
                dtype_name(q.dtype()), ", k ", dtype_name(k.dtype()), ", v ", dtype_name(v.dtype()),
                " (expected one element type; hint: to_dtype)");
  }
  // The forward once s.L is set (o in q's shape and o's layout): shared with GroupedAttentionOp
  template <class B>
  static Tensor<B> run(Saved<B>& s, const Tensor<B>& q, const Tensor<B>& k, const Tensor<B>& v,
                       bool causal) {
    const AttentionLayout& L = s.L;
    s.scale = 1.0f / std::sqrt(static_cast<float>(L.D));
    s.causal = causal;
    const auto qf = detail::widened(q), kf = detail::widened(k), vf = detail::widened(v);
    auto o = detail::empty_like(qf);
    s.aux = detail::make_tensor<B>(&q.tape(), Shape{B::attention_aux_numel(L.B * L.H, L.T, L.D)});
    B::attention_forward(L, o.template data<float>(), s.aux.template data<float>(),
                         qf.template data<float>(), kf.template data<float>(),
                         vf.template data<float>(), s.scale, causal);
    s.q = q;
    s.k = k;
    s.v = v;
    o = detail::narrowed(o, q.dtype());
    if (B::attention_needs_output(L.D)) s.o = o;
    return o;
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp,
                       const std::vector<char>& fresh) {  // NOTE [fresh gradient buffers]
    auto ptr = [](const Tensor<B>& t) { return t.defined() ? t.template data<float>() : nullptr; };
    const auto g = detail::widened(dout), o = detail::widened(s.o);
    const auto q = detail::widened(s.q), k = detail::widened(s.k), v = detail::widened(s.v);
    detail::F32Grad<B> dq(dinp[0], detail::fresh_at(fresh, 0)),
        dk(dinp[1], detail::fresh_at(fresh, 1)), dv(dinp[2], detail::fresh_at(fresh, 2));
    B::attention_backward(s.L, dq.data(), dk.data(), dv.data(), g.template data<float>(), ptr(o),
                          q.template data<float>(), k.template data<float>(),
                          v.template data<float>(), s.aux.template data<float>(), s.scale,
                          s.causal, dq.set(), dk.set(), dv.set());
    dq.finish();
    dk.finish();
    dv.finish();
  }
};

// The same math on GPT's packed layout: qkv (B, T, 3C) holds q | k | v, each C = H D wide, and
// o (B, T, C) holds the heads side by side, ready for the output projection.
struct SelfAttentionOp {
  static constexpr const char* name = "self_attention";
  template <class B>
  struct Saved {
    AttentionLayout L;
    float scale = 1.0f;
    bool causal = true;
    Tensor<B> qkv, aux, o;
    template <class F> void each(F f) const { f(qkv); f(aux); f(o); }
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& qkv, std::int64_t n_head, bool causal) {
    detail::check_float(name, "qkv", qkv);
    detail::check_nonempty(name, "qkv", qkv);
    REMAT_CHECK(qkv.rank() == 3 && qkv.size(2) % 3 == 0 && n_head > 0 &&
                    (qkv.size(2) / 3) % n_head == 0,
                "remat::self_attention: qkv is ", qkv.shape().str(), " with ", n_head,
                " heads (expected [B, T, 3C] with C divisible by the number of heads)");
    AttentionLayout& L = s.L;
    const std::int64_t C = qkv.size(2) / 3;
    L.B = qkv.size(0);
    L.H = n_head;
    L.T = qkv.size(1);
    L.D = C / n_head;
    L.q_batch = L.T * 3 * C;
    L.q_head = L.D;
    L.q_row = 3 * C;
    L.o_batch = L.T * C;
    L.o_head = L.D;
    L.o_row = C;
    L.kv_like_q();
    s.scale = 1.0f / std::sqrt(static_cast<float>(L.D));
    s.causal = causal;
    auto o = detail::make_tensor<B>(&qkv.tape(), Shape{L.B, L.T, C});
    s.aux = detail::make_tensor<B>(&qkv.tape(), Shape{B::attention_aux_numel(L.B * L.H, L.T, L.D)});
    const auto qkvf = detail::widened(qkv);
    const float* q = qkvf.template data<float>();
    B::attention_forward(L, o.template data<float>(), s.aux.template data<float>(), q, q + C,
                         q + 2 * C, s.scale, causal);
    s.qkv = qkv;
    o = detail::narrowed(o, qkv.dtype());
    if (B::attention_needs_output(L.D)) s.o = o;
    return o;
  }
  template <class B>
  // dq, dk and dv tile dqkv whole: a fresh dqkv is written, not zeroed first
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp,
                       const std::vector<char>& fresh) {
    const std::int64_t C = s.L.H * s.L.D;
    const auto qkv = detail::widened(s.qkv), g = detail::widened(dout), o = detail::widened(s.o);
    const float* q = qkv.template data<float>();
    detail::F32Grad<B> dqkv(dinp[0], detail::fresh_at(fresh, 0));
    float* d = dqkv.data();
    const bool set = dqkv.set();
    B::attention_backward(s.L, d, d + C, d + 2 * C, g.template data<float>(),
                          o.defined() ? o.template data<float>() : nullptr, q, q + C, q + 2 * C,
                          s.aux.template data<float>(), s.scale, s.causal, set, set, set);
    dqkv.finish();
  }
};

// Grouped-query attention on heads as the projections give them (no transposes, no copies):
// q (B, T, H, D); k and v (B, T, KVH, D) with H a multiple of KVH; query head h reads key/value
// head h / G, G = H / KVH, never repeated in memory. o (B, T, H, D). KVH = H is multi-head
// attention, KVH = 1 multi-query. The math is AttentionOp's, and its backward; dk and dv of a
// key/value head sum over the G query heads that read it, in head order.
struct GroupedAttentionOp {
  static constexpr const char* name = "grouped_attention";
  template <class B>
  using Saved = AttentionOp::Saved<B>;
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& q, const Tensor<B>& k,
                           const Tensor<B>& v, bool causal) {
    AttentionOp::check_types(name, q, k, v);
    const bool ranks = q.rank() == 4 && k.rank() == 4 && k.shape() == v.shape();
    REMAT_CHECK(ranks && k.size(0) == q.size(0) && k.size(1) == q.size(1) &&
                    k.size(3) == q.size(3) && k.size(2) > 0 && q.size(2) % k.size(2) == 0,
                "remat::grouped_attention: q is ", q.shape().str(), ", k is ", k.shape().str(),
                ", v is ", v.shape().str(),
                " (expected q [B, T, H, D] and k, v [B, T, KVH, D] with H a multiple of KVH; "
                "hint: heads second to last, as a projection's [B, T, H D] reshaped)");
    detail::check_nonempty(name, "q", q);
    AttentionLayout& L = s.L;
    L.B = q.size(0);
    L.T = q.size(1);
    L.H = q.size(2);
    L.D = q.size(3);
    L.G = L.H / k.size(2);
    L.q_batch = L.o_batch = L.T * L.H * L.D;
    L.q_head = L.o_head = L.D;
    L.q_row = L.o_row = L.H * L.D;
    L.kv_batch = L.T * L.KVH() * L.D;
    L.kv_head = L.D;
    L.kv_row = L.KVH() * L.D;
    return AttentionOp::run(s, q, k, v, causal);
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp,
                       const std::vector<char>& fresh) {
    AttentionOp::backward(s, dout, dinp, fresh);
  }
};

/// softmax(q k^T / sqrt(D)) v over the last two axes (T, D); `causal` masks future keys.
template <class B>
Tensor<B> attention(const Tensor<B>& q, const Tensor<B>& k, const Tensor<B>& v, bool causal = true) {
  return detail::apply<AttentionOp>(std::array<Tensor<B>, 3>{q, k, v}, causal);
}

/// Grouped-query attention: q [B, T, H, D], k and v [B, T, KVH, D] (H a multiple of KVH) ->
/// [B, T, H, D]; query head h attends with key/value head h / (H / KVH).
template <class B>
Tensor<B> grouped_attention(const Tensor<B>& q, const Tensor<B>& k, const Tensor<B>& v,
                            bool causal = true) {
  return detail::apply<GroupedAttentionOp>(std::array<Tensor<B>, 3>{q, k, v}, causal);
}

/// Multi-head attention on a packed qkv (B, T, 3C) -> (B, T, C) with n_head heads of C / n_head.
template <class B>
Tensor<B> self_attention(const Tensor<B>& qkv, std::int64_t n_head, bool causal = true) {
  return detail::apply<SelfAttentionOp>(std::array<Tensor<B>, 1>{qkv}, n_head, causal);
}

}  // namespace remat
