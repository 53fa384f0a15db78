#pragma once
// SPDX-License-Identifier: MIT
// save_state / load_state: the whole training state in one safetensors file (a snapshot):
// weights ("model.<name>"), optimizer state ("adamw.m.<name>", "adamw.v.<name>",
// "sgd.momentum.<name>"), and in its metadata the step, the data position, the RNG and (from
// an nn::GPT) the model config. Every field is validated on load (NOTE [snapshot model config]).
// Written atomically (io/atomic_file.hpp): a crash mid-write leaves the previous snapshot.
// (A snapshot is training state on disk; "checkpoint" in remat means activation checkpointing.)

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <system_error>
#include <type_traits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "remat/io/safetensors.hpp"
#include "remat/nn/gpt.hpp"
#include "remat/nn/module.hpp"
#include "remat/optim/adamw.hpp"
#include "remat/optim/sgd.hpp"

namespace remat {
namespace io {

struct TrainState {
  std::int64_t step = 0;            // steps done
  std::int64_t data_position = 0;   // the batcher's position
  std::uint64_t rng_seed = 0;       // the tape's random stream
  std::uint64_t rng_offset = 0;
  std::map<std::string, std::string> extra;  // anything else (the trainer stores its flags)
};

namespace detail {
enum class Values { any, finite, finite_nonnegative };
// Checks the tensor `key` against `shape` (and `check`), then, with dst, copies it to dst's
// first shape.numel() floats and zeroes the padding up to `numel` (NOTE [padded parameters]).
template <class B>
void restore(const SafetensorsFile& f, const std::string& key, const Shape& shape, float* dst,
             std::int64_t numel, const std::string& path, Values check = Values::any) {
  auto it = f.tensors.find(key);
  REMAT_CHECK(it != f.tensors.end(), "remat::io::load_state: '", path, "' has no tensor '", key,
              "' (was it saved from another model or optimizer?)");
  REMAT_CHECK(it->second.shape == shape, "remat::io::load_state: '", key, "' in '", path,
              "' has shape ", it->second.shape.str(), ", the model's is ", shape.str());
  const std::vector<float>& v = it->second.data;
  if (check != Values::any)
    for (std::size_t i = 0; i < v.size(); ++i)
      REMAT_CHECK(std::isfinite(v[i]) && (check == Values::finite || v[i] >= 0.0f),
                  "remat::io::load_state: optimizer state '", key, "' in '", path, "' has ", v[i],
                  " at element ", i, " (expected ", check == Values::finite ? "finite values" :
                  "finite values >= 0", "; a corrupt snapshot would make every later loss NaN)");
  if (dst) copy_padded<B>(dst, numel, v);  // null: check only
}
inline const std::string& meta(const SafetensorsFile& f, const char* k, const std::string& path) {
  auto it = f.metadata.find(k);
  REMAT_CHECK(it != f.metadata.end(), "remat::io::load_state: '", path, "' lacks metadata '", k,
              "' (is it a remat snapshot?)");
  return it->second;
}
/// Metadata `k` as a decimal integer in [lo, hi]: digits only (a '-' only when lo < 0, and
/// never "-0"), no spaces, no '+', no trailing characters. (from_chars alone reads "-0" as 0.)
template <class T>
T meta_int(const SafetensorsFile& f, const char* k, const std::string& path, T lo, T hi) {
  const std::string& s = meta(f, k, path);
  bool sign_ok = !s.empty() && s[0] != '-';
  if constexpr (std::is_signed_v<T>)  // (a constexpr branch: nvcc warns on unsigned < 0)
    sign_ok = sign_ok || (!s.empty() && lo < T{0} && s.size() > 1 && s[1] != '0');
  T v{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 10);
  REMAT_CHECK(sign_ok && ec == std::errc() && end == s.data() + s.size() && v >= lo && v <= hi,
              "remat::io::load_state: metadata '", k, "' of '", path, "' is '", s,
              "' (expected an integer from ", lo, " to ", hi, " with nothing around it; the "
              "snapshot is corrupt or was edited)");
  return v;
}
inline constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
inline constexpr std::int64_t kMaxAdamwSteps = std::int64_t{1} << 62;

// NOTE [snapshot model config]: a snapshot saved from an nn::GPT records its config
// ("config.n_layer", ...) and format remat-state-2; loading it into an nn::GPT compares every
// field, because some differences keep every tensor shape (n_head, dropout) and would otherwise
// resume a different model silently. remat-state-1 snapshots (before the config was stored) are
// still read, with only their tensor shapes checked.
inline constexpr const char* kConfigFields[] = {"config.n_layer",    "config.n_embd",
                                               "config.n_head",     "config.vocab_size",
                                               "config.block_size", "config.dropout"};
inline std::string fmt_float(float x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", static_cast<double>(x));
  return b;
}
inline std::map<std::string, std::string> config_meta(const nn::GPTConfig& c) {
  return {{"config.n_layer", std::to_string(c.n_layer)},
          {"config.n_embd", std::to_string(c.n_embd)},
          {"config.n_head", std::to_string(c.n_head)},
          {"config.vocab_size", std::to_string(c.vocab_size)},
          {"config.block_size", std::to_string(c.block_size)},
          {"config.dropout", fmt_float(c.dropout)},
          {"config.precision", dtype_name(c.precision)}};
}
inline void check_config(const SafetensorsFile& f, const nn::GPTConfig& c, const std::string& path) {
  if (meta(f, "format", path) == "remat-state-1") return;  // older: no config stored
  const auto now = config_meta(c);
  for (const char* key : kConfigFields) {
    const std::string& saved = meta(f, key, path);
    if (std::string(key) == "config.dropout") {
      char* end = nullptr;
      const double v = std::strtod(saved.c_str(), &end);
      REMAT_CHECK(!saved.empty() && end == saved.c_str() + saved.size() && std::isfinite(v) &&
                      v >= 0.0 && v < 1.0,
                  "remat::io::load_state: metadata 'config.dropout' of '", path, "' is '", saved,
                  "' (expected a number in [0, 1); the snapshot is corrupt or was edited)");
    } else {
      meta_int<std::int64_t>(f, key, path, key == std::string("config.n_layer") ? 0 : 1,
                             kInt64Max);
    }
    const std::string& mine = now.at(key);
    REMAT_CHECK(saved == mine, "remat::io::load_state: '", path, "' was saved from a model with ",
                key + 7, " ", saved, ", but this model has ", mine, " (", key + 7,
                " differs: resume with the model config the snapshot was trained with)");
  }
  // the compute type: the parameters are f32 either way, but a bf16 run resumed in f32 (or the
  // reverse) would not continue the same run; snapshots from before it was stored were f32
  const auto it = f.metadata.find("config.precision");
  const std::string saved = it == f.metadata.end() ? "f32" : it->second;
  REMAT_CHECK(saved == now.at("config.precision"), "remat::io::load_state: '", path,
              "' was saved from a model that computes in ", saved, ", but this model computes in ",
              now.at("config.precision"), " (precision differs: resume with the precision the "
              "snapshot was trained with)");
}

template <class B>
void save_state_impl(const std::string& path, const nn::Module<B>& model, optim::AdamW<B>* adamw,
                     optim::SGD<B>* sgd, const TrainState& st,
                     const std::map<std::string, std::string>& config, void (*after_half)()) {
  std::vector<std::pair<std::string, HostTensor>> ts;
  const auto& named = model.named_parameters();
  for (std::size_t i = 0; i < named.size(); ++i)
    ts.emplace_back("model." + named[i].first,
                    detail::host_prefix<B>(named[i].second.template data<float>(),
                                           model.saved_shape(i)));
  std::map<std::string, std::string> md = st.extra;
  for (const auto& [k, v] : config) md[k] = v;
  md["format"] = "remat-state-2";
  md["step"] = std::to_string(st.step);
  md["data_position"] = std::to_string(st.data_position);
  md["rng_seed"] = std::to_string(st.rng_seed);
  md["rng_offset"] = std::to_string(st.rng_offset);
  md["optimizer"] = adamw ? "adamw" : sgd ? "sgd" : "none";
  for (std::size_t i = 0; i < named.size(); ++i) {
    const auto& [name, t] = named[i];
    if (adamw && adamw->has_moments(i)) {
      const auto [m, v] = adamw->moments(i);
      ts.emplace_back("adamw.m." + name, detail::host_prefix<B>(m, model.saved_shape(i)));
      ts.emplace_back("adamw.v." + name, detail::host_prefix<B>(v, model.saved_shape(i)));
    }
    if (sgd && sgd->has_momentum_buffer(i))
      ts.emplace_back("sgd.momentum." + name,
                      detail::host_prefix<B>(sgd->momentum_buffer(i), model.saved_shape(i)));
  }
  if (adamw) md["adamw_steps"] = std::to_string(adamw->steps());
  write_safetensors(path, ts, md, after_half);
}

inline void check_format(const SafetensorsFile& f, const std::string& path) {
  auto fmt = f.metadata.find("format");
  REMAT_CHECK(fmt != f.metadata.end() &&
                  (fmt->second == "remat-state-1" || fmt->second == "remat-state-2"),
              "remat::io::load_state: '", path, "' is not a remat snapshot (metadata 'format' "
              "should be 'remat-state-2', or 'remat-state-1' for older ones); to start from "
              "weights only, load them as a model file");
}

/// Every tensor of the snapshot must be one load_state restores: "model.<parameter>", and the
/// optimizer state of a parameter for the optimizer in use. Another (a parameter the model
/// lacks, another optimizer's state) means the snapshot belongs to another model or run.
template <class Named>
void check_tensor_names(const SafetensorsFile& f, const std::string& path, const Named& named,
                        bool adamw, bool sgd) {
  std::set<std::string> params;
  for (const auto& p : named) params.insert(p.first);
  const auto known = [&](const std::string& key) {
    for (const char* prefix : {"model.", "adamw.m.", "adamw.v.", "sgd.momentum."}) {
      const std::string pre(prefix);
      if (key.rfind(pre, 0) != 0 || !params.count(key.substr(pre.size()))) continue;
      if (pre == "model." || (adamw && pre.rfind("adamw.", 0) == 0) || (sgd && pre == "sgd.momentum."))
        return true;
    }
    return false;
  };
  for (const auto& kv : f.tensors)
    REMAT_CHECK(known(kv.first), "remat::io::load_state: '", path, "' has tensor '", shown(kv.first),
                "', which is neither a parameter of the model ('model.<name>') nor the state of the "
                "optimizer in use for one (was it saved from another model or optimizer?)");
}

template <class B>
TrainState load_state_impl(const SafetensorsFile& f, const std::string& path, nn::Module<B>& model,
                           optim::AdamW<B>* adamw, optim::SGD<B>* sgd) {
  const std::string want = adamw ? "adamw" : sgd ? "sgd" : "none";
  const std::string& saved_opt = meta(f, "optimizer", path);
  REMAT_CHECK(saved_opt == "adamw" || saved_opt == "sgd" || saved_opt == "none",
              "remat::io::load_state: '", path, "' has optimizer '", saved_opt,
              "' (expected adamw, sgd or none; the snapshot is corrupt or was edited)");
  REMAT_CHECK(saved_opt == want, "remat::io::load_state: '", path, "' was saved with optimizer '",
              saved_opt, "', resuming with '", want, "' (expected the same optimizer)");
  auto cs = f.metadata.find("checkpoint_strategy");
  if (cs != f.metadata.end()) {
    try {
      (void)nn::CheckpointStrategy::parse(cs->second);
    } catch (const Error& e) {
      throw Error(::remat::detail::cat("remat::io::load_state: metadata 'checkpoint_strategy' of '",
                                       path, "' is not a strategy: ", e.what()));
    }
  }
  // Every metadata field first, so a bad one changes nothing in the model or the optimizer.
  TrainState st;
  st.step = meta_int<std::int64_t>(f, "step", path, 0, kInt64Max);
  st.data_position = meta_int<std::int64_t>(f, "data_position", path, 0, kInt64Max);
  st.rng_seed = meta_int<std::uint64_t>(f, "rng_seed", path, 0, ~std::uint64_t{0});
  st.rng_offset = meta_int<std::uint64_t>(f, "rng_offset", path, 0, ~std::uint64_t{0});
  // AdamW counts on from it (++t in step()): 2^62 is beyond any run and leaves room to count.
  const std::int64_t adamw_steps =
      adamw ? meta_int<std::int64_t>(f, "adamw_steps", path, 0, kMaxAdamwSteps) : 0;
  // Then every tensor (presence, shape, values) in a first pass that copies nothing, so a
  // rejected snapshot leaves the model and the optimizer as they were.
  const auto& named = model.named_parameters();
  check_tensor_names(f, path, named, adamw != nullptr, sgd != nullptr);
  for (const bool apply : {false, true}) {
    const auto checked = [apply](Values v) { return apply ? Values::any : v; };  // once is enough
    for (std::size_t i = 0; i < named.size(); ++i) {
      const auto& [name, t] = named[i];
      const Shape saved = model.saved_shape(i);  // NOTE [padded parameters]
      detail::restore<B>(f, "model." + name, saved,
                         apply ? t.template mutable_data<float>() : nullptr, t.numel(), path);
      // NOTE [snapshot optimizer state]: the snapshot is the optimizer's whole state. A
      // parameter without moments in it never had a gradient in the saved run, and must have
      // none after the load: an optimizer that has some (it stepped before load_state) would
      // keep them beside the snapshot's step count, a state no run ever had. That is an error.
      if (!apply && adamw && !f.tensors.count("adamw.m." + name) && !f.tensors.count("adamw.v." + name))
        REMAT_CHECK(!adamw->has_moments(i), "remat::io::load_state: '", path, "' has no optimizer "
                    "state 'adamw.m.", name, "' or 'adamw.v.", name, "', but the optimizer has "
                    "moments for '", name, "' from earlier steps (NOTE [snapshot optimizer state]: "
                    "load a snapshot into a fresh optimizer, before any step)");
      if (!apply && sgd && !f.tensors.count("sgd.momentum." + name))
        REMAT_CHECK(!sgd->has_momentum_buffer(i), "remat::io::load_state: '", path, "' has no "
                    "optimizer state 'sgd.momentum.", name, "', but the optimizer has a momentum "
                    "buffer for '", name, "' from earlier steps (NOTE [snapshot optimizer state]: "
                    "load a snapshot into a fresh optimizer, before any step)");
      if (adamw && (f.tensors.count("adamw.m." + name) || f.tensors.count("adamw.v." + name))) {
        const auto mv = apply ? adamw->moments(i) : std::pair<float*, float*>{nullptr, nullptr};
        detail::restore<B>(f, "adamw.m." + name, saved, mv.first, t.numel(), path,
                           checked(Values::finite));
        detail::restore<B>(f, "adamw.v." + name, saved, mv.second, t.numel(), path,
                           checked(Values::finite_nonnegative));
      }
      if (sgd && f.tensors.count("sgd.momentum." + name))
        detail::restore<B>(f, "sgd.momentum." + name, saved,
                           apply ? sgd->momentum_buffer(i) : nullptr, t.numel(), path,
                           checked(Values::finite));
    }
  }
  if (adamw) adamw->set_steps(adamw_steps);
  for (const auto& [k, v] : f.metadata) st.extra[k] = v;
  return st;
}
}  // namespace detail

/// Writes model weights, optimizer state (pass the one in use, the other null) and `st`.
template <class B>
void save_state(const std::string& path, const nn::Module<B>& model, optim::AdamW<B>* adamw,
                optim::SGD<B>* sgd, const TrainState& st, void (*after_half)() = nullptr) {
  detail::save_state_impl(path, model, adamw, sgd, st, {}, after_half);
}
/// As above, and records the GPT's config, which load_state compares (NOTE [snapshot model config]).
template <class B>
void save_state(const std::string& path, const nn::GPT<B>& model, optim::AdamW<B>* adamw,
                optim::SGD<B>* sgd, const TrainState& st, void (*after_half)() = nullptr) {
  detail::save_state_impl(path, static_cast<const nn::Module<B>&>(model), adamw, sgd, st,
                          detail::config_meta(model.config), after_half);
}

/// Reads a snapshot into the model and the optimizer in use; returns its TrainState. Every
/// metadata field is parsed strictly and the optimizer state must be finite (v >= 0), so a
/// corrupt snapshot is an error, never a run of NaN losses.
template <class B>
TrainState load_state(const std::string& path, nn::Module<B>& model, optim::AdamW<B>* adamw,
                      optim::SGD<B>* sgd) {
  const SafetensorsFile f = read_safetensors(path);
  detail::check_format(f, path);
  return detail::load_state_impl(f, path, model, adamw, sgd);
}
/// As above, and the snapshot's model config must equal the model's (NOTE [snapshot model config]).
template <class B>
TrainState load_state(const std::string& path, nn::GPT<B>& model, optim::AdamW<B>* adamw,
                      optim::SGD<B>* sgd) {
  const SafetensorsFile f = read_safetensors(path);
  detail::check_format(f, path);
  detail::check_config(f, model.config, path);
  return detail::load_state_impl(f, path, static_cast<nn::Module<B>&>(model), adamw, sgd);
}

}  // namespace io
}  // namespace remat
