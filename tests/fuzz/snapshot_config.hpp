#pragma once
// SPDX-License-Identifier: MIT
// The model the snapshot fuzz target loads into; make_seeds.cpp saves its seeds from the same
// model, so they pass the config check and reach the tensor and optimizer checks.

#include <remat/nn/gpt.hpp>

namespace remat_fuzz {

inline remat::nn::GPTConfig snapshot_config() {
  remat::nn::GPTConfig c;
  c.vocab_size = 6;
  c.block_size = 3;
  c.n_layer = 1;
  c.n_embd = 4;
  c.n_head = 2;
  c.dropout = 0.25f;
  return c;
}

}  // namespace remat_fuzz
