#pragma once
// SPDX-License-Identifier: MIT
// One tensor's part of a multi-tensor optimizer update: the pointers an update reads and writes
// and its length. An optimizer hands a backend every parameter's slice at once
// (B::adamw_update_many, B::sgd_update_many), so a device updates them in a few launches
// instead of one per parameter (NOTE [multi-tensor updates] in backend/cuda/optim.cuh).

#include <cstdint>

namespace remat {

struct UpdateSlice {
  float* p = nullptr;        // the parameter
  const float* g = nullptr;  // its gradient
  float* m = nullptr;        // AdamW's first moment; SGD's momentum buffer (null: none)
  float* v = nullptr;        // AdamW's second moment (SGD: unused)
  std::int64_t n = 0;        // elements
  bool first = false;        // SGD: the momentum buffer's first use (it is set, not mixed)
};

}  // namespace remat
