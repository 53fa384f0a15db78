// SPDX-License-Identifier: MIT
// Fuzz target: io::load_state (train_gpt --resume) into a small GPT with the optimizer the
// snapshot names (AdamW, SGD with momentum, or none): metadata parsed strictly, the config
// compared, tensors' shapes and the optimizer state's values checked. A snapshot that loads
// must give a usable state: step and data position >= 0, AdamW's step count >= 0, and a
// training step with its optimizer runs.
// A recipe input ("RCP\0", recipe.hpp) starts from a snapshot save_state wrote (AdamW, SGD or
// none) and makes one thing hostile: a metadata integer ("-0", "+1", " 1", too large), a model
// tensor or one half of a parameter's moments missing, a parameter's whole optimizer state
// missing (loaded into a fresh optimizer: it must then have none for that parameter; into one
// that already stepped: refused, NOTE [snapshot optimizer state]), an unknown tensor, a shape,
// NaN or negative optimizer state, another optimizer named, or any hostile_st_change. Changes
// that must be refused never load; an unchanged snapshot loads with exactly its values.

#include <cmath>
#include <limits>

#include <remat/io/snapshot.hpp>
#include <remat/remat.hpp>

#include "fuzz_common.hpp"
#include "recipe.hpp"
#include "snapshot_config.hpp"

namespace {

using namespace remat;

// Snapshots save_state wrote (adamw, sgd, none), read back: what recipes start from.
const std::vector<io::SafetensorsFile>& templates() {
  static const auto* t = [] {
    auto* out = new std::vector<io::SafetensorsFile>;
    Tape<Cpu> tape(3);
    nn::GPT<Cpu> model(tape, remat_fuzz::snapshot_config());
    const auto params = model.parameters();
    optim::AdamW<Cpu> adamw(params, {1e-3f});
    optim::SGD<Cpu> sgd(params, {1e-2f, 0.9f, 0.0f, true});
    const std::vector<std::int32_t> x = {1, 2, 3}, y = {2, 3, 4};
    tape.backward(model.loss(tape.tokens({1, 3}, x), tape.tokens({1, 3}, y)));
    adamw.step();
    sgd.step();
    io::TrainState st;
    st.step = 1;
    st.data_position = 3;
    st.rng_offset = tape.rng_offset();
    const std::string p = remat_fuzz::scratch_dir() + "/template.safetensors";
    for (int k = 0; k < 3; ++k) {
      io::save_state(p, model, k == 0 ? &adamw : nullptr, k == 1 ? &sgd : nullptr, st);
      out->push_back(io::read_safetensors(p));
    }
    std::remove(p.c_str());
    return out;
  }();
  return *t;
}

// Loads a snapshot as train_gpt --resume does (the optimizer named in the file); returns the
// model's parameters and, for each, whether the optimizer has state for it.
struct Param {
  std::string name;
  std::vector<float> values;
  bool has_state;
};
using Loaded = std::vector<Param>;

Loaded load_and_step(const std::string& path, bool step_first) {
  // train_gpt picks the optimizer from its flags; here, from the snapshot, so that a valid
  // one gets past the optimizer check (an unreadable file fails here, as it would below).
  std::string opt = "adamw";
  {
    const io::SafetensorsFile f = io::read_safetensors(path);
    const auto it = f.metadata.find("optimizer");
    if (it != f.metadata.end() && (it->second == "sgd" || it->second == "none")) opt = it->second;
  }
  Tape<Cpu> tape(3);
  nn::GPT<Cpu> model(tape, remat_fuzz::snapshot_config());
  const auto params = model.parameters();
  optim::AdamW<Cpu> adamw(params, {1e-3f});
  optim::SGD<Cpu> sgd(params, {1e-2f, 0.9f, 0.0f, true});
  optim::AdamW<Cpu>* a = opt == "adamw" ? &adamw : nullptr;
  optim::SGD<Cpu>* s = opt == "sgd" ? &sgd : nullptr;
  const std::vector<std::int32_t> x = {1, 2, 3}, y = {2, 3, 4};
  if (step_first) {  // an optimizer that already has state (load_state into a used one)
    tape.backward(model.loss(tape.tokens({1, 3}, x), tape.tokens({1, 3}, y)));
    if (a) a->step();
    if (s) s->step();
    optim::zero_grad(params);
  }
  const io::TrainState st = io::load_state(path, model, a, s);
  if (st.step < 0 || st.data_position < 0 || adamw.steps() < 0)
    throw std::logic_error("load_state accepted a negative step, position or AdamW step count");
  Loaded out;
  const auto& named = model.named_parameters();
  for (std::size_t i = 0; i < named.size(); ++i)
    out.push_back({named[i].first, named[i].second.to_vector(),
                   a ? a->has_moments(i) : s ? s->has_momentum_buffer(i) : false});
  // The loaded state is usable: one training step runs (the loss may be NaN: the weights
  // are the file's, and only the optimizer state is checked for finite values).
  const auto loss = model.loss(tape.tokens({1, 3}, x), tape.tokens({1, 3}, y));
  tape.backward(loss);
  if (a) a->step();
  if (s) s->step();
  return out;
}

void run_recipe(const std::uint8_t* data, std::size_t size) {
  remat_fuzz::Recipe r(data + 4, size - 4);
  const std::uint64_t op = r.below(10);
  const std::uint64_t kind = r.below(3);  // 0 adamw, 1 sgd, 2 none
  const io::SafetensorsFile& t = templates()[kind];
  std::map<std::string, io::HostTensor> tensors(t.tensors.begin(), t.tensors.end());
  std::map<std::string, std::string> metadata = t.metadata;
  std::vector<std::string> params;  // the model's parameter names
  for (const auto& kv : tensors)
    if (kv.first.rfind("model.", 0) == 0) params.push_back(kv.first.substr(6));
  const std::string opt_prefix = kind == 0 ? "adamw.m." : kind == 1 ? "sgd.momentum." : "";
  remat_fuzz::Change change;
  change.must_refuse = true;
  bool step_first = false;
  std::string stateless;  // a parameter whose optimizer state the snapshot lacks
  const std::string& param = params[r.below(params.size())];
  bool generic = false;
  switch (op) {
    case 0:
      change = remat_fuzz::Change{};
      break;
    case 1: {  // a metadata integer
      static const char* const keys[] = {"step", "data_position", "rng_seed", "rng_offset", "adamw_steps",
                                         "config.n_layer", "config.n_head", "config.block_size"};
      static const char* const values[] = {"-0", "-1", "+1", " 1", "1 ", "", "0x10", "1e3", "-00",
                                           "99999999999999999999", "4611686018427387905", "007"};
      const std::string k = r.pick(keys), v = r.pick(values);
      metadata[k] = v;
      change.what = "metadata " + k + " '" + v + "'";
      const bool config = k.rfind("config.", 0) == 0, applies = k != "adamw_steps" || kind == 0;
      change.must_refuse = applies && (config || (v != "007" && (v != "4611686018427387905" || k == "adamw_steps")));
      break;
    }
    case 2:  // a model tensor missing
      tensors.erase("model." + param);
      change.what = "no tensor model." + param;
      break;
    case 3:  // a parameter's optimizer state missing (both moments, or SGD's momentum)
      if (kind == 2) {
        change = remat_fuzz::Change{};
        break;
      }
      tensors.erase(opt_prefix + param);
      if (kind == 0) tensors.erase("adamw.v." + param);
      stateless = param;
      step_first = r.coin();
      change.what = "no optimizer state for " + param + (step_first ? ", into an optimizer that stepped" : "");
      change.must_refuse = step_first;  // fresh: loads, with no state for it
      break;
    case 4:  // one moment of two missing
      if (kind != 0) {
        change.must_refuse = false;
        change.what = "nothing (not AdamW)";
        break;
      }
      tensors.erase((r.coin() ? "adamw.m." : "adamw.v.") + param);
      change.what = "one moment of " + param + " missing";
      break;
    case 5: {  // an unknown tensor
      static const char* const names[] = {"model.h.1.ln_1.weight", "adamw.m.nope", "sgd.momentum.wte.weight",
                                          "junk", "model.", "adamw.v.h.0.ln_1.weightx"};
      const std::string name = r.pick(names);
      tensors[name] = io::HostTensor{Shape{1}, {0.0f}};
      change.what = "an unknown tensor " + name;
      change.must_refuse = !(kind == 1 && name == "sgd.momentum.wte.weight");  // SGD's own
      if (!change.must_refuse) tensors.erase(name);
      break;
    }
    case 6: {  // a shape with the right count but other dims
      const std::string name = r.coin() || kind == 2 ? "model." + param : opt_prefix + param;
      io::HostTensor& x = tensors.at(name);
      std::vector<std::int64_t> d = x.shape.vec();
      if (d.size() == 2 && d[0] != d[1]) std::swap(d[0], d[1]);
      else d.insert(d.begin(), 1);
      x.shape = Shape(d);
      change.what = name + " reshaped";
      break;
    }
    case 7: {  // optimizer state that is not finite (or v < 0)
      if (kind == 2) {
        change = remat_fuzz::Change{};
        break;
      }
      const bool v = kind == 0 && r.coin();
      io::HostTensor& x = tensors.at((v ? "adamw.v." : opt_prefix) + param);
      static const float bad[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -1.0f};
      float b = r.pick(bad);
      if (!v && b == -1.0f) b = -std::numeric_limits<float>::infinity();  // m < 0 is fine
      x.data[r.below(x.data.size())] = b;
      change.what = "optimizer state " + std::to_string(b);
      break;
    }
    case 8: {  // another optimizer named than the state in the file
      static const char* const opts[] = {"adamw", "sgd", "none"};
      const std::string o = r.pick(opts);
      change.what = "optimizer '" + o + "' in a " + metadata["optimizer"] + " snapshot";
      change.must_refuse = o != metadata["optimizer"] && kind != 2;
      metadata["optimizer"] = o;
      break;
    }
    default:
      generic = true;
  }
  remat_fuzz::StFile file;
  for (const auto& [name, x] : tensors) remat_fuzz::add_f32(file, name, x.shape.vec(), x.data);
  for (const auto& [k, v] : metadata) file.metadata.emplace_back(remat_fuzz::json_string(k), remat_fuzz::json_string(v));
  if (generic) {
    change = remat_fuzz::hostile_st_change(file, r);
    if (!change.must_refuse) change.what = "st: " + change.what;
  }
  if (remat_fuzz::verbose())
    std::fprintf(stderr, "  recipe: %s snapshot, %s\n", t.metadata.at("optimizer").c_str(), change.what.c_str());
  const std::string bytes = file.bytes();
  const std::string& path =
      remat_fuzz::mem_file().write(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  remat_fuzz::guarded([&] {
    Loaded got;
    try {
      got = load_and_step(path, step_first);
    } catch (const remat::Error& e) {
      if (change.what == "none" || (!stateless.empty() && !step_first))
        throw std::logic_error(std::string("load_state refused a valid snapshot (") + change.what + "): " + e.what());
      throw;
    }
    if (change.must_refuse) throw std::logic_error("load_state accepted a snapshot with " + change.what);
    if (change.what == "none" || !stateless.empty()) {
      for (const Param& p : got) {
        if (p.values != tensors.at("model." + p.name).data)
          throw std::logic_error("load_state: parameter " + p.name + " differs from the snapshot's");
        // the optimizer has state exactly where the snapshot has it (NOTE [snapshot optimizer state])
        if (p.has_state != (kind != 2 && tensors.count(opt_prefix + p.name) > 0))
          throw std::logic_error("load_state: the optimizer's state for " + p.name + " is not the snapshot's");
      }
    }
  });
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  remat_fuzz::init_environment();
  remat::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (remat_fuzz::is_recipe(data, size)) {
    run_recipe(data, size);
    return 0;
  }
  const std::string& path = remat_fuzz::mem_file().write(data, size);
  return remat_fuzz::guarded([&] { (void)load_and_step(path, false); });
}
