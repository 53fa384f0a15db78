// SPDX-License-Identifier: MIT
// 01_scalar_grad: the smallest use of the tape. f = a x^2 + b; backward gives
// df/dx = 2 a x, df/da = x^2, df/db = 1.   Run: build/examples/01_scalar_grad
#include <cstdio>

#include <remat/remat.hpp>

int main() {
  remat::Tape<remat::Cpu> tape;
  auto x = tape.parameter({1}, {3.0f});
  auto a = tape.parameter({1}, {2.0f});
  auto b = tape.parameter({1}, {4.0f});
  auto f = remat::sum(a * x * x + b);  // f = 2 * 3^2 + 4 = 22
  tape.backward(f);
  std::printf("f = %.1f  df/dx = %.1f  df/da = %.1f  df/db = %.1f\n", f.item(), x.grad().item(),
              a.grad().item(), b.grad().item());
  return 0;
}
