// SPDX-License-Identifier: MIT
// The system's memory limit (NOTE [System memory limit] in backend/cpu/system_memory.hpp):
// cgroup v2 and v1 files read along the process's own cgroup path, the level with the least
// room chosen, junk ignored; the ledger's limit below it; a backend's ledger that starts with
// its host's limit and names it when an allocation passes it.

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <remat/remat.hpp>

#include "support/catch.hpp"

using namespace remat;
using cpu::SystemMemory;

namespace {
// A scratch tree of fake /proc/self and /sys/fs/cgroup files.
struct FakeTree {
  FakeTree() {
    char tmpl[] = "/tmp/remat-sysmem-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    root = tmpl;
  }
  ~FakeTree() { [[maybe_unused]] int rc = std::system(("rm -rf '" + root + "'").c_str()); }
  void write(const std::string& rel, const std::string& text) const {
    const std::string path = root + "/" + rel;
    [[maybe_unused]] int rc = std::system(("mkdir -p \"$(dirname '" + path + "')\"").c_str());
    std::ofstream(path) << text;
  }
  SystemMemory read() const { return cpu::read_system_memory(root + "/proc", root + "/cg"); }
  std::string root;
};

// A backend tag whose host imposes a limit (the ledger is per backend type).
struct LimitedHost {
  static detail::SystemLimit system_memory_limit() { return {1000, "a test host's limit"}; }
};
struct UnlimitedHost {
  static detail::SystemLimit system_memory_limit() { return {}; }
};
}  // namespace

TEST_CASE("cgroup v2: each level of the process's path up to the root, the least room wins",
          "[memory][system]") {
  FakeTree t;
  t.write("proc/cgroup", "0::/job/step\n");
  t.write("cg/job/step/memory.max", "max\n");
  t.write("cg/job/step/memory.current", "5000\n");
  t.write("cg/job/memory.max", "3221225472\n");  // 3 GiB on the parent applies to the step too
  t.write("cg/job/memory.current", "1073741824\n");
  SystemMemory s = t.read();
  CHECK(s.limit == 3221225472);
  CHECK(s.used == 1073741824);
  CHECK(s.room() == 2147483648);
  CHECK(s.source.find("cgroup v2 memory.max of " + t.root + "/cg/job") != std::string::npos);

  t.write("cg/job/step/memory.max", "2000000000\n");  // a tighter limit on the leaf
  s = t.read();
  CHECK(s.limit == 2000000000);
  CHECK(s.room() == 2000000000 - 5000);

  t.write("cg/job/step/memory.max", "12abc\n");  // junk is no limit
  t.write("cg/job/memory.max", "-5\n");
  CHECK(t.read().limit == 0);
}

TEST_CASE("cgroup v1: the memory hierarchy among several, unlimited values ignored",
          "[memory][system]") {
  FakeTree t;
  t.write("proc/cgroup", "7:cpu,cpuacct:/x\n4:memory:/batch/job\n0::/\n");
  t.write("cg/memory/memory.limit_in_bytes", "9223372036854771712\n");  // v1's "no limit"
  t.write("cg/memory/memory.usage_in_bytes", "99999999\n");
  t.write("cg/memory/batch/job/memory.limit_in_bytes", "1073741824\n");
  t.write("cg/memory/batch/job/memory.usage_in_bytes", "73741824\n");
  const SystemMemory s = t.read();
  CHECK(s.limit == 1073741824);
  CHECK(s.room() == 1000000000);
  CHECK(s.source.find("cgroup v1 memory.limit_in_bytes") != std::string::npos);

  FakeTree none;  // no cgroup files at all: no limit
  none.write("proc/cgroup", "0::/\n");
  CHECK(none.read().limit == 0);
  CHECK(cpu::ledger_limit_under(none.read()) == 0);
}

TEST_CASE("inside a cgroup namespace the mount's root is the process's cgroup",
          "[memory][system]") {
  FakeTree t;
  t.write("proc/cgroup", "0::/kubepods/pod1/ctr\n");  // a path that does not exist here
  t.write("cg/memory.max", "536870912\n");
  t.write("cg/memory.current", "36870912\n");
  const SystemMemory s = t.read();
  CHECK(s.limit == 536870912);
  CHECK(s.room() == 500000000);
}

TEST_CASE("the ledger's limit leaves 64 MiB and 3% of the room for what it does not count",
          "[memory][system]") {
  SystemMemory s{std::int64_t{3} << 30, std::int64_t{1} << 30, "test"};
  const std::int64_t room = std::int64_t{2} << 30;
  CHECK(cpu::ledger_limit_under(s) == room - (std::int64_t{64} << 20) - room / 100 * 3);
  s.used = s.limit;  // no room left: a limit of 1 byte, so the first allocation says why
  CHECK(cpu::ledger_limit_under(s) == 1);
  CHECK(cpu::ledger_limit_under(SystemMemory{}) == 0);
  // This process: whatever the machine has, the reading must not fail.
  const SystemMemory here = cpu::read_system_memory();
  CHECK(here.used >= 0);
  if (here.limit > 0) CHECK(here.source.size() > 0);
}

TEST_CASE("a backend's ledger starts with its host's limit and names it", "[memory][system]") {
  detail::apply_system_limit<LimitedHost>();
  CHECK(detail::ledger<LimitedHost>().limit() == 1000);
  CHECK(memory_limit<LimitedHost>() == 1000);
  bool named = false;
  try {
    detail::ledger<LimitedHost>().check_limit(Category::activations, 2000);
  } catch (const OutOfMemory& e) {
    named = std::string(e.what()).find("a test host's limit") != std::string::npos;
  }
  CHECK(named);
  set_memory_limit<LimitedHost>(0);  // the user's call replaces it
  CHECK(memory_limit<LimitedHost>() == 0);
  CHECK_NOTHROW(detail::ledger<LimitedHost>().check_limit(Category::activations, 2000));

  detail::apply_system_limit<UnlimitedHost>();
  CHECK(memory_limit<UnlimitedHost>() == 0);
}
