#pragma once
// SPDX-License-Identifier: MIT
// A training loop's report of each step, for any model: one JSON object per line (for scripts),
// or a progress line (for people: redrawn in place on a terminal, else every few steps). The
// loop fills a StepReport; nothing here knows the model or how the run was configured.
//
//   train::Progress progress(/*json=*/false, train::stdout_is_terminal());
//   for (...) { ...; progress.print(report, eta_s); }
//   progress.finish();

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace remat {
namespace train {

/// A duration in seconds as "hh:mm:ss", rounded to the second.
inline std::string format_duration(double s) {
  const long long t = s > 0.0 ? static_cast<long long>(s + 0.5) : 0;
  char b[48];
  std::snprintf(b, sizeof b, "%02lld:%02lld:%02lld", t / 3600, (t / 60) % 60, t % 60);
  return b;
}

/// `s` as the body of a JSON string (quotes, backslashes and control characters escaped).
inline std::string json_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      out += b;
    } else {
      out += ch;
    }
  }
  return out;
}

/// What one step did, as the loop measured it.
struct StepReport {
  int step = 0;                     ///< steps done so far (1 after the first)
  int steps = 0;                    ///< the run's total
  double loss = 0.0;                ///< the step's training loss
  double lr = 0.0;                  ///< the learning rate of its update
  double step_s = 0.0;              ///< wall time of the step (an evaluation after it excluded)
  double tokens_per_s = 0.0;        ///< tokens of the step (all ranks) / step_s
  std::int64_t peak_bytes = 0;      ///< the ledger's peak during the step
  std::int64_t peak_saved_bytes = 0;  ///< of which activations saved for backward
  std::optional<double> val_loss;   ///< the validation loss, on steps that evaluated
  std::string extra_json;           ///< more fields, each as `,"key":value`
  std::string replanned;            ///< non-empty when the step was re-planned: the new plan
};

/// The report as one JSON object (no newline): step, loss, val_loss (when evaluated), lr,
/// step_s, tokens_per_s, peak_bytes, peak_saved_bytes, the extra fields, replanned (when set).
/// Floats print with 9 significant digits, which round-trip a float.
inline std::string json_line(const StepReport& r) {
  char head[160], tail[256], val[64] = "";
  std::snprintf(head, sizeof head, "{\"step\":%d,\"loss\":%.9g", r.step, r.loss);
  if (r.val_loss) std::snprintf(val, sizeof val, ",\"val_loss\":%.9g", *r.val_loss);
  std::snprintf(tail, sizeof tail, ",\"lr\":%.9g,\"step_s\":%.6f,\"tokens_per_s\":%.1f,"
                "\"peak_bytes\":%lld,\"peak_saved_bytes\":%lld", r.lr, r.step_s, r.tokens_per_s,
                static_cast<long long>(r.peak_bytes), static_cast<long long>(r.peak_saved_bytes));
  std::string out = std::string(head) + val + tail + r.extra_json;
  if (!r.replanned.empty()) out += ",\"replanned\":\"" + json_escape(r.replanned) + "\"";
  return out + "}";
}

/// The report as a progress line (no line end): "step 5/100 | loss 3.1234 | val 3.2345 |
/// lr 0.0003 | 1234 tok/s | peak 12.3 MiB | ETA 00:01:02". The validation loss shows on steps
/// that evaluated, the rate when `show_lr` (a schedule), " | re-planned" after a re-plan.
inline std::string progress_line(const StepReport& r, double eta_s, bool show_lr) {
  char b[320], val[40] = "", lr[40] = "";
  if (r.val_loss) std::snprintf(val, sizeof val, " | val %.4f", *r.val_loss);
  if (show_lr) std::snprintf(lr, sizeof lr, " | lr %.3g", r.lr);
  std::snprintf(b, sizeof b, "step %d/%d | loss %.4f%s%s | %.0f tok/s | peak %.1f MiB | ETA %s%s",
                r.step, r.steps, r.loss, val, lr, r.tokens_per_s,
                static_cast<double>(r.peak_bytes) / 1048576.0, format_duration(eta_s).c_str(),
                r.replanned.empty() ? "" : " | re-planned");
  return b;
}

/// True when standard output is a terminal (a live progress line then makes sense).
inline bool stdout_is_terminal() { return ::isatty(STDOUT_FILENO) != 0; }

/// Prints the reports on standard output: JSON lines, or progress lines. On a terminal the line
/// is redrawn after every step; in a log it is printed every `every` steps, at the last step
/// and on steps that evaluated.
class Progress {
 public:
  Progress(bool json, bool terminal, int every = 10, bool show_lr = false)
      : json_(json), live_(!json && terminal), every_(every > 0 ? every : 1), show_lr_(show_lr) {}

  /// True when the progress line is redrawn in place (a message must start on a new line).
  bool live() const noexcept { return live_; }
  /// "\n" when a live line is showing, so that a message printed now starts on its own line.
  const char* break_line() const noexcept { return live_ ? "\n" : ""; }

  void print(const StepReport& r, double eta_s) {
    if (json_) {
      std::printf("%s\n", json_line(r).c_str());
    } else if (live_) {
      std::printf("\r%s   ", progress_line(r, eta_s, show_lr_).c_str());
    } else if (r.step == r.steps || r.step % every_ == 0 || r.val_loss) {
      std::printf("%s\n", progress_line(r, eta_s, show_lr_).c_str());
    }
    std::fflush(stdout);
  }
  /// Ends a live line.
  void finish() {
    if (live_) std::printf("\n");
    std::fflush(stdout);
  }

 private:
  bool json_, live_;
  int every_;
  bool show_lr_;
};

}  // namespace train
}  // namespace remat
