// SPDX-License-Identifier: MIT
// train_gpt: trains a GPT-2-style or a Llama-family model (Llama 3, Qwen 2/3, SmolLM2) from the
// command line, with activation checkpointing.
//   build/examples/train_gpt --layers 4 --d 128 --steps 100 --checkpoint block
//   build/examples/train_gpt --init-from SmolLM2-135M/ --tokenizer SmolLM2-135M/ --data my.txt
//                            --checkpoint budget:2GiB --save tuned/ --sample 40
//   build/examples/train_gpt --model llama --layers 4 --d 128 --heads 4 --kv-heads 2
//   build/examples/train_gpt --init-from model.safetensors --data train.bin --optimizer sgd
//   build/examples/train_gpt --init-from model.safetensors --tokenizer gpt2/ --data my.txt --sample 50
//   mpirun -np 2 build/examples/train_gpt --batch 4 --global-batch 16 --checkpoint block
// Data: a raw text file (bytes, vocab 256; GPT-2 ids with --tokenizer), an llm.c .bin file, or
// (no --data) a built-in corpus. With --tokenizer, --prompt and --sample are text. Weights in
// and out in Hugging Face's GPT-2 safetensors layout; full training-state snapshots
// (--snapshot-every, --resume) are written atomically. See --help.
// --val-data FILE (--val-every N, --val-batches K): a validation loss in the progress line and
// the JSON, the same on any rank count.
// The trainer never loses work: every flag and output path is checked before the first step
// (NOTE [output paths]), Ctrl-C saves before it exits (NOTE [interrupt]), a save that fails
// at the end writes the weights elsewhere and says where, and a diverged run stops at the step
// that diverged (NOTE [diverged run]); those NOTEs are in include/remat/train/, the loop's
// parts that work for any model.

// The trainer itself, for any backend: trainer.hpp (train<B>), with the flags' checks in
// flags.hpp and the data and model in setup.hpp. This file declares the flags and runs the
// trainer on the CPU, or on CUDA when this build has the CUDA backend (cuda.cu).

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>
#if REMAT_TRAIN_GPT_MPI
#include <remat/dist/mpi.hpp>
#endif
#include <remat/remat.hpp>

#include "trainer.hpp"

using namespace remat;
using train_gpt::Flags;

#if REMAT_TRAIN_GPT_CUDA
namespace train_gpt {
int train_on_cuda(const Flags& f, const CLI::App& app, dist::Comm& comm);  // cuda.cu
}
#endif

namespace {

// --device: the CPU, or CUDA where this build has it.
int train_on(const Flags& f, const CLI::App& app, dist::Comm& comm) {
  if (f.device == "cpu") {
    set_num_threads(f.threads);
    return train_gpt::train<Cpu>(f, app, comm);
  }
#if REMAT_TRAIN_GPT_CUDA
  if (f.device == "cuda") return train_gpt::train_on_cuda(f, app, comm);
  const char* devices = "cpu or cuda";
#else
  const char* devices = "cpu; this build has no CUDA backend: build with a CUDA toolkit (nvcc) "
                        "for --device cuda";
#endif
  REMAT_CHECK(false, "train_gpt: --device ", f.device, " is not a device of this build (expected ",
              devices, ")");
  return 1;
}

// The flags (their checks: flags.hpp), in the order --help lists them.
void add_options(CLI::App& app, Flags& f) {
  app.add_option("--model", f.model, "gpt (GPT-2) or llama (the Llama family: Llama 3, Qwen 2/3, "
                 "SmolLM2); default: what --init-from's config.json says, else gpt")
      ->check(CLI::IsMember({"gpt", "llama"}));
  app.add_option("--layers", f.layers, "transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--d", f.d, "model width")->check(CLI::PositiveNumber);
  app.add_option("--heads", f.heads, "attention heads (default: as the --init-from file records, else d/64)")->check(CLI::NonNegativeNumber);
  app.add_option("--kv-heads", f.kv_heads, "key/value heads of a new Llama-family model (grouped-query "
                 "attention; default: --heads)")->check(CLI::PositiveNumber);
  app.add_option("--ffn", f.ffn, "SwiGLU width of a new Llama-family model (default: 8d/3 rounded up to "
                 "a multiple of 64)")->check(CLI::PositiveNumber);
  app.add_option("--seq", f.seq, "sequence length")->check(CLI::PositiveNumber);
  app.add_option("--vocab", f.vocab, "vocabulary size (256 for raw text)")->check(CLI::PositiveNumber);
  app.add_option("--vocab-multiple", f.vocab_multiple,
                 "pad the token embedding to a multiple of this many rows (128: GPT-2's 50257 -> "
                 "50304, for aligned GEMMs on a GPU); internal: the padding is never predicted or "
                 "sampled, and saved files and snapshots hold --vocab rows")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--batch", f.batch, "sequences per micro-step of one rank (a step takes ranks x "
                 "micro-steps of them)")->check(CLI::PositiveNumber);
  app.add_option("--grad-accum", f.grad_accum, "micro-steps per step, their gradients summed "
                 "before the update (default 1)")->check(CLI::PositiveNumber);
  app.add_flag("--zero", f.zero, "ZeRO-1: shard AdamW's moments over the ranks (each keeps 1/ranks "
               "of them; the training is bitwise the same)");
  app.add_flag("--batch-invariant", f.batch_invariant, "run each micro-batch one sequence at a "
               "time, so that the bits do not depend on --batch either: with the same global "
               "batch and --threads, a snapshot resumes on another rank count with another "
               "--batch bit for bit, when each rank's sequences per step are a power of two "
               "(slower at short --seq)");
  app.add_option("--bucket-mib", f.bucket_mib, "gradient bucket size for the sums over ranks, in "
                 "MiB (default 25, as PyTorch DDP; the first bucket is at most 1 MiB)");
  app.add_option("--global-batch", f.global_batch, "sequences per step over all ranks: sets the "
                 "micro-steps to global / (ranks x --batch), which must divide")->check(CLI::PositiveNumber);
  app.add_option("--steps", f.steps, "total steps (a resumed run continues up to it)")->check(CLI::NonNegativeNumber);
  app.add_option("--lr", f.lr, "learning rate (the peak, with --lr-schedule cosine)");
  app.add_option("--lr-schedule", f.lr_schedule,
                 "constant, or cosine: linear warmup over --warmup steps, then cosine decay "
                 "towards --min-lr over the run (llm.c's schedule)");
  app.add_option("--warmup", f.warmup, "steps of linear warmup (--lr-schedule cosine)");
  app.add_option("--min-lr", f.min_lr, "the rate cosine decay ends at (default 0)");
  app.add_option("--seed", f.seed, "seed of the initialization and of dropout");
  app.add_option("--grad-clip", f.grad_clip, "global gradient-norm limit (0: off)");
  app.add_option("--threads", f.threads, "CPU threads")->check(CLI::PositiveNumber);
  app.add_option("--optimizer", f.optimizer, "adamw or sgd")->check(CLI::IsMember({"adamw", "sgd"}));
  app.add_option("--momentum", f.momentum, "SGD momentum");
  app.add_option("--weight-decay", f.weight_decay,
                 "weight decay (decoupled for AdamW), on the matrices (linear weights, embeddings)");
  app.add_flag("--decay-all", f.decay_all, "apply --weight-decay to every parameter, norms' gains "
               "and biases too");
  app.add_option("--dropout", f.dropout, "dropout probability");
  app.add_option("--precision", f.precision,
                 "fp32, or bf16: activations and products in bf16 with fp32 sums, the weights, "
                 "their gradients and the optimizer's state in fp32")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--checkpoint", f.checkpoint,
                 "none, block, every:N, sqrt, save_linear (old name: selective), budget:SIZE "
                 "(e.g. budget:300MiB: the fastest plan whose whole step fits) or auto (the "
                 "memory free now, less 10%)");
  app.add_option("--memory-limit", f.memory_limit,
                 "cap the memory of the device trained on (e.g. 2GiB; the ledger's live bytes): past "
                 "it an allocation is out of memory, and the step is re-planned for the limit and "
                 "run again");
  app.add_flag("--estimate", f.estimate,
               "print the predicted peak of a step under every fixed strategy (and the plan of a "
               "budget) without training");
  app.add_flag("!--no-profile", f.profile,
               "plan budgets from FLOP counts instead of timing a block first");
  app.add_option("--data", f.data, "a text file (bytes, or GPT-2 ids with --tokenizer), an llm.c .bin "
                 "file, or - for standard input; none: built-in text");
  app.add_option("--tokenizer", f.tokenizer, "the model's tokenizer: a directory with encoder.json + "
                 "vocab.bpe, vocab.json + merges.txt, or tokenizer.json (GPT-2's, a Llama family "
                 "model's), or a tokenizer.json file; text data, --prompt and --sample are then its tokens");
  app.add_option("--init-from", f.init_from, "GPT-2 weights (Hugging Face safetensors layout), or a "
                 "Llama-family Hugging Face folder (config.json + model.safetensors or its shards)");
  app.add_option("--save", f.save, "write the weights here at the end and on Ctrl-C (GPT-2: a "
                 "safetensors file; the Llama family: a Hugging Face folder)");
  app.add_option("--save-dtype", f.save_dtype, "the weights' type in --save's file: fp32 (F32, "
                 "the default), or bf16 (BF16, rounded to nearest even: half the bytes)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--snapshot-every", f.snapshot_every, "write the training state every N steps");
  app.add_option("--snapshot-path", f.snapshot_path, "where the training state goes (every --snapshot-every steps, at the end, and on Ctrl-C)");
  app.add_option("--resume", f.resume, "continue from a training-state snapshot");
  app.add_option("--sample", f.sample, "generate N tokens after training");
  app.add_option("--prompt", f.prompt, "the prompt for --sample: text with --tokenizer or a 256-token "
                 "(byte) vocabulary, else token ids separated by blanks");
  app.add_option("--temperature", f.temperature, "sampling temperature (0: the most likely token)");
  app.add_option("--device", f.device, "cpu, or cuda (a build with the CUDA backend: the trainer on one GPU)");
  app.add_flag("--json", f.json, "one JSON object per step instead of the progress line");
  app.add_option("--val-data", f.val_data, "held-out tokens for a validation loss, in --data's "
                 "formats (a text file, an llm.c .bin file); shown as val in the progress line "
                 "and val_loss in the JSON");
  app.add_option("--val-every", f.val_every, "compute the validation loss after every N steps "
                 "and after the last one (default 0: after the last one only)");
  app.add_option("--val-batches", f.val_batches, "the first N batches of --batch x --seq tokens "
                 "of --val-data make the validation set (default 20, or as many as it holds)");
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"Train a GPT-2-style or Llama-family model with activation checkpointing (remat)"};
  add_options(app, f);
  CLI11_PARSE(app, argc, argv);
  // Under an MPI launcher (mpirun, mpiexec, srun --mpi=pmix) with an MPI build: one rank of a
  // data-parallel run. Otherwise one process.
  std::unique_ptr<dist::Comm> comm;
#if REMAT_TRAIN_GPT_MPI
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (!comm && std::getenv(v)) comm = std::make_unique<dist::MpiComm>(&argc, &argv);
#endif
  if (!comm) comm = std::make_unique<dist::LocalComm>();
  try {
    return train_on(f, app, *comm);  // train<B> takes a copy: it settles defaults that depend on the files
  } catch (const std::exception& e) {
    std::fflush(stdout);
    // remat's allocations throw remat::OutOfMemory; a std::bad_alloc is memory outside the
    // ledger (a library's buffer, a container) that the system refused.
    const bool bad_alloc = dynamic_cast<const std::bad_alloc*>(&e) != nullptr;
    const std::string what = bad_alloc ? std::string("out of memory: an allocation outside remat's "
                                                     "ledger failed (") + e.what() +
                                             "); hint: lower --batch or --seq, or turn on checkpointing"
                                       : std::string(e.what());
    if (comm->size() == 1) {
      std::fprintf(stderr, "train_gpt: error: %s\n", what.c_str());
      return 1;
    }
    // Several ranks: an error every rank meets (a bad flag, ranks that disagree) is said once,
    // by rank 0, whose abort ends the others before they speak; an error of one rank is said
    // by that rank. Then the job ends: the others may wait for this rank in a collective.
    if (comm->rank() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::fprintf(stderr, "train_gpt: error (rank %d of %d): %s\n", comm->rank(), comm->size(), what.c_str());
    comm->abort(1);
    return 1;
  }
}
