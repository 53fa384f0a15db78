#pragma once
// SPDX-License-Identifier: MIT
// save_state / load_state: the whole training state in one safetensors file (a snapshot):
// weights ("model.<name>"), optimizer state ("adamw.m.<name>", "adamw.v.<name>",
// "sgd.momentum.<name>"), and in its metadata the step, the data position and the RNG.
// Written atomically (io/atomic_file.hpp): a crash mid-write leaves the previous snapshot.
// (A snapshot is training state on disk; "checkpoint" in remat means activation checkpointing.)

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "remat/io/safetensors.hpp"
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
template <class B>
HostTensor host(const Tensor<B>& t) {
  return HostTensor{t.shape(), t.template to_vector<float>()};
}
template <class B>
HostTensor host(const float* p, const Shape& s) {
  HostTensor h{s, std::vector<float>(static_cast<std::size_t>(s.numel()))};
  if (!h.data.empty()) B::copy_to_host(h.data.data(), p, h.data.size() * 4);
  return h;
}
template <class B>
void restore(const SafetensorsFile& f, const std::string& key, const Shape& shape, float* dst,
             const std::string& path) {
  auto it = f.tensors.find(key);
  REMAT_CHECK(it != f.tensors.end(), "remat::io::load_state: '", path, "' has no tensor '", key,
              "' (was it saved from another model or optimizer?)");
  REMAT_CHECK(it->second.shape == shape, "remat::io::load_state: '", key, "' in '", path,
              "' has shape ", it->second.shape.str(), ", the model's is ", shape.str());
  if (!it->second.data.empty()) B::copy_from_host(dst, it->second.data.data(), it->second.data.size() * 4);
}
inline std::int64_t meta_int(const SafetensorsFile& f, const char* k, const std::string& path) {
  auto it = f.metadata.find(k);
  REMAT_CHECK(it != f.metadata.end(), "remat::io::load_state: '", path, "' lacks metadata '", k,
              "' (is it a remat snapshot?)");
  try {
    return static_cast<std::int64_t>(std::stoull(it->second));
  } catch (const std::exception&) {
    throw Error(::remat::detail::cat("remat::io::load_state: metadata '", k, "' of '", path,
                                     "' is not a number: '", it->second, "'"));
  }
}
}  // namespace detail

/// Writes model weights, optimizer state (pass the one in use, the other null) and `st`.
template <class B>
void save_state(const std::string& path, const nn::Module<B>& model, optim::AdamW<B>* adamw,
                optim::SGD<B>* sgd, const TrainState& st, void (*after_half)() = nullptr) {
  std::vector<std::pair<std::string, HostTensor>> ts;
  const auto& named = model.named_parameters();
  for (const auto& [name, t] : named) ts.emplace_back("model." + name, detail::host(t));
  std::map<std::string, std::string> meta = st.extra;
  meta["format"] = "remat-state-1";
  meta["step"] = std::to_string(st.step);
  meta["data_position"] = std::to_string(st.data_position);
  meta["rng_seed"] = std::to_string(st.rng_seed);
  meta["rng_offset"] = std::to_string(st.rng_offset);
  meta["optimizer"] = adamw ? "adamw" : sgd ? "sgd" : "none";
  for (std::size_t i = 0; i < named.size(); ++i) {
    const auto& [name, t] = named[i];
    if (adamw && adamw->has_moments(i)) {
      const auto [m, v] = adamw->moments(i);
      ts.emplace_back("adamw.m." + name, detail::host<B>(m, t.shape()));
      ts.emplace_back("adamw.v." + name, detail::host<B>(v, t.shape()));
    }
    if (sgd && sgd->has_momentum_buffer(i))
      ts.emplace_back("sgd.momentum." + name, detail::host<B>(sgd->momentum_buffer(i), t.shape()));
  }
  if (adamw) meta["adamw_steps"] = std::to_string(adamw->steps());
  write_safetensors(path, ts, meta, after_half);
}

/// Reads a snapshot into the model and the optimizer in use; returns its TrainState.
template <class B>
TrainState load_state(const std::string& path, nn::Module<B>& model, optim::AdamW<B>* adamw,
                      optim::SGD<B>* sgd) {
  const SafetensorsFile f = read_safetensors(path);
  auto fmt = f.metadata.find("format");
  REMAT_CHECK(fmt != f.metadata.end() && fmt->second == "remat-state-1", "remat::io::load_state: '",
              path, "' is not a remat snapshot (metadata 'format' should be 'remat-state-1'); "
              "to start from weights only, load them as a model file");
  const std::string want = adamw ? "adamw" : sgd ? "sgd" : "none";
  REMAT_CHECK(f.metadata.count("optimizer") && f.metadata.at("optimizer") == want,
              "remat::io::load_state: '", path, "' was saved with optimizer '",
              f.metadata.count("optimizer") ? f.metadata.at("optimizer") : "?", "', resuming with '",
              want, "' (expected the same optimizer)");
  const auto& named = model.named_parameters();
  for (std::size_t i = 0; i < named.size(); ++i) {
    const auto& [name, t] = named[i];
    detail::restore<B>(f, "model." + name, t.shape(), t.template data<float>(), path);
    if (adamw && f.tensors.count("adamw.m." + name)) {
      const auto [m, v] = adamw->moments(i);
      detail::restore<B>(f, "adamw.m." + name, t.shape(), m, path);
      detail::restore<B>(f, "adamw.v." + name, t.shape(), v, path);
    }
    if (sgd && f.tensors.count("sgd.momentum." + name))
      detail::restore<B>(f, "sgd.momentum." + name, t.shape(), sgd->momentum_buffer(i), path);
  }
  if (adamw) adamw->set_steps(detail::meta_int(f, "adamw_steps", path));
  TrainState st;
  st.step = detail::meta_int(f, "step", path);
  st.data_position = detail::meta_int(f, "data_position", path);
  st.rng_seed = static_cast<std::uint64_t>(detail::meta_int(f, "rng_seed", path));
  st.rng_offset = static_cast<std::uint64_t>(detail::meta_int(f, "rng_offset", path));
  for (const auto& [k, v] : f.metadata) st.extra[k] = v;
  return st;
}

}  // namespace io
}  // namespace remat
