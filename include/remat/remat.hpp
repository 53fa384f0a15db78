#pragma once
// SPDX-License-Identifier: MIT
// remat: header-only C++ autograd with activation checkpointing. This umbrella brings in the
// core (tensors, tape, memory ledger), every op, the nn modules, the optimizers and the CPU
// backend. It compiles without CUDA; the GPU backend is opt-in through remat/cuda.hpp.
//
//   remat::Tape<remat::Cpu> tape;                    // records ops, runs backward
//   remat::nn::GPT<remat::Cpu> model(tape, config);  // parameters named as in HF GPT-2
//   auto loss = model.loss(idx, targets);            // forward
//   tape.backward(loss);                             // gradients into model parameters
//   remat::memory_stats<remat::Cpu>();               // exact live / peak bytes by category

#include "remat/version.hpp"
#include "remat/config.hpp"

#include "remat/checkpoint/checkpoint.hpp"
#include "remat/checkpoint/policy.hpp"
#include "remat/core/apply.hpp"
#include "remat/core/custom_op.hpp"
#include "remat/core/error.hpp"
#include "remat/core/flat.hpp"
#include "remat/core/grad_mode.hpp"
#include "remat/core/memory.hpp"
#include "remat/core/rng.hpp"
#include "remat/core/segment.hpp"
#include "remat/core/shape.hpp"
#include "remat/core/step.hpp"
#include "remat/core/tape.hpp"
#include "remat/core/tensor.hpp"

#include "remat/ops/activation.hpp"
#include "remat/ops/attention.hpp"
#include "remat/ops/cast.hpp"
#include "remat/ops/dropout.hpp"
#include "remat/ops/elementwise.hpp"
#include "remat/ops/embedding.hpp"
#include "remat/ops/layer_norm.hpp"
#include "remat/ops/loss.hpp"
#include "remat/ops/matmul.hpp"
#include "remat/ops/mlp.hpp"
#include "remat/ops/reduce.hpp"
#include "remat/ops/rotary.hpp"
#include "remat/ops/softmax.hpp"
#include "remat/ops/unary.hpp"
#include "remat/ops/view.hpp"
#include "remat/ops/where.hpp"

#include "remat/nn/attention.hpp"
#include "remat/nn/gpt.hpp"
#include "remat/nn/layers.hpp"
#include "remat/nn/llama.hpp"
#include "remat/nn/module.hpp"

#include "remat/dist/comm.hpp"           // LocalComm; MpiComm: remat/mpi.hpp (target remat::mpi)
#include "remat/dist/data_parallel.hpp"  // gradient accumulation, data parallel

#include "remat/optim/adamw.hpp"
#include "remat/optim/grad.hpp"
#include "remat/optim/sgd.hpp"
#include "remat/optim/state.hpp"
#include "remat/optim/train_step.hpp"

#include "remat/plan/stages.hpp"  // a model as a chain of stages; its planner: remat/plan/fit_stages.hpp

#include "remat/backend/cpu.hpp"
