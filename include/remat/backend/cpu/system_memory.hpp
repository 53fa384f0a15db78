// SPDX-License-Identifier: MIT
#pragma once
// The memory limit the system puts on this process (cgroup v2 or v1, RLIMIT_AS), for the CPU
// backend's default memory limit (NOTE [System memory limit]) and the `auto` checkpoint budget.

#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace remat {
namespace cpu {

// NOTE [System memory limit]
// Why: the kernel enforces a cgroup's memory limit when a page is touched, not when memory is
// asked for: past memory.max the process is killed (SIGKILL) with nothing said and nothing
// saved, where a GPU would have answered with out-of-memory. Under RLIMIT_AS it is the other
// way round (mmap and malloc fail), but the first to fail may be any std::vector.
// How: the CPU backend reads the limits once, at its first allocation: the memory cgroup of this
// process (its own path from /proc/self/cgroup, each level up to the root: v2 memory.max
// against memory.current, v1 memory.limit_in_bytes against memory.usage_in_bytes) and
// RLIMIT_AS against VmSize. The least room under any of them, less a margin for what the ledger
// does not count (64 MiB and 3% of the room: allocator slack, OpenBLAS's buffers, the tape's
// nodes, code), becomes the CPU ledger's memory limit, as if set_memory_limit<Cpu> had been
// called. So an allocation past it throws remat::OutOfMemory naming the limit, before the
// kernel would kill the process, and a training loop can re-plan for it as for a limit it
// set itself.
// set_memory_limit<Cpu>(n) replaces it (0 removes it); REMAT_SYSTEM_MEMORY_LIMIT=0 in the
// environment turns the reading off.
struct SystemMemory {
  std::int64_t limit = 0;  // the limit with the least room (bytes); 0: none found
  std::int64_t used = 0;   // what counts against it now
  std::string source;      // where it was read, e.g. "cgroup v2 memory.max of /sys/fs/cgroup/job"

  /// Bytes left under the limit (0 if none).
  std::int64_t room() const noexcept { return limit > 0 ? std::max<std::int64_t>(0, limit - used) : 0; }
};

namespace sysmem {
// The first number in a file; -1 if it is missing, "max" or not a number.
inline std::int64_t read_bytes(const std::string& path) {
  std::ifstream f(path);
  std::string v;
  if (!(f >> v) || v == "max") return -1;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (end == v.c_str() || *end != '\0' || x < 0) return -1;
  return static_cast<std::int64_t>(x);
}
// A "kB" field of /proc/<pid>/status in bytes; -1 if missing.
inline std::int64_t status_bytes(const std::string& path, const std::string& field) {
  std::ifstream f(path);
  std::string key, unit;
  long long kb = 0;
  while (f >> key >> kb >> unit)
    if (key == field + ":") return static_cast<std::int64_t>(kb) * 1024;
  return -1;
}
// Offers limit/used to `best` if it leaves less room. Limits at or above 2^60 mean none.
inline void offer(SystemMemory& best, std::int64_t limit, std::int64_t used, const std::string& source) {
  if (limit <= 0 || limit >= (std::int64_t{1} << 60) || used < 0) return;
  const SystemMemory s{limit, used, source};
  if (best.limit == 0 || s.room() < best.room()) best = s;
}
// Each level of a cgroup path, from the process's own up to the root of the hierarchy: the
// limit of every level applies to the subtree below it.
inline void walk_cgroup(SystemMemory& best, const std::string& root, std::string path,
                        const char* limit_file, const char* used_file, const char* version) {
  if (path.empty() || path[0] != '/') path = "/" + path;
  for (;;) {
    const std::string dir = root + (path == "/" ? "" : path);
    offer(best, read_bytes(dir + "/" + limit_file), read_bytes(dir + "/" + used_file),
          std::string("cgroup ") + version + " " + limit_file + " of " + dir);
    if (path == "/") return;
    const auto slash = path.find_last_of('/');
    path = slash == 0 ? "/" : path.substr(0, slash);
  }
}
}  // namespace sysmem

/// The limit on this process's memory with the least room left (NOTE [System memory limit]).
/// The roots are parameters for tests.
inline SystemMemory read_system_memory(const std::string& proc_self = "/proc/self",
                                       const std::string& cgroup_root = "/sys/fs/cgroup") {
  SystemMemory best;
  std::ifstream f(proc_self + "/cgroup");
  std::string line;
  while (std::getline(f, line)) {  // "hierarchy-id:controllers:path"
    const auto a = line.find(':'), b = line.find(':', a == std::string::npos ? a : a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string id = line.substr(0, a), controllers = line.substr(a + 1, b - a - 1),
                      path = line.substr(b + 1);
    if (id == "0" && controllers.empty()) {  // v2: one unified hierarchy
      sysmem::walk_cgroup(best, cgroup_root, path, "memory.max", "memory.current", "v2");
    } else {
      std::stringstream list(controllers);
      std::string c;
      bool memory = false;
      while (std::getline(list, c, ',')) memory = memory || c == "memory";
      if (memory)
        sysmem::walk_cgroup(best, cgroup_root + "/memory", path, "memory.limit_in_bytes",
                            "memory.usage_in_bytes", "v1");
    }
  }
  // Inside a cgroup namespace the paths above may not exist; the mount's root is this cgroup.
  sysmem::offer(best, sysmem::read_bytes(cgroup_root + "/memory.max"),
                sysmem::read_bytes(cgroup_root + "/memory.current"),
                "cgroup v2 memory.max of " + cgroup_root);
  sysmem::offer(best, sysmem::read_bytes(cgroup_root + "/memory/memory.limit_in_bytes"),
                sysmem::read_bytes(cgroup_root + "/memory/memory.usage_in_bytes"),
                "cgroup v1 memory.limit_in_bytes of " + cgroup_root + "/memory");
  if (proc_self == "/proc/self") {
    rlimit r{};
    if (getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY)
      sysmem::offer(best, static_cast<std::int64_t>(r.rlim_cur),
                    sysmem::status_bytes(proc_self + "/status", "VmSize"), "RLIMIT_AS (ulimit -v)");
  }
  return best;
}

/// The CPU ledger's limit under `s`: its room less 64 MiB and 3% (NOTE [System memory limit]);
/// 0 if there is no limit. At least 1 byte when a limit exists but no room is left, so that
/// the first allocation fails with a clear message.
inline std::int64_t ledger_limit_under(const SystemMemory& s) {
  if (s.limit <= 0) return 0;
  const std::int64_t room = s.room();
  const std::int64_t margin = (std::int64_t{64} << 20) + room / 100 * 3;
  return std::max<std::int64_t>(1, room - margin);
}

}  // namespace cpu
}  // namespace remat
