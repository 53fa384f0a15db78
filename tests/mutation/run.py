#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Mutation pass: plants each single-line bug of mutations.py, rebuilds a test binary from the
tests that should catch it, runs it, and prints a table (killed by which test, or survived).

Works on a copy of the repository (the working tree as it is, uncommitted changes included),
never on the tree itself: each mutation is applied to the copy and reverted there even when a
build or a run fails or is interrupted. The copy and its build stay in --workdir between runs
(only files whose bytes changed are copied again, so unchanged objects are reused).

  python3 tests/mutation/run.py                       # all mutations
  python3 tests/mutation/run.py --only adamw_eps_in_sqrt,sgd_nesterov_broken
  python3 tests/mutation/run.py --existing-only       # without tests/*/test_mutations_*.cpp
  python3 tests/mutation/run.py --list

Each mutation compiles its own binary of 1-3 test files at -O1 (minutes at -j1 after a change
to a header everything includes); --jobs sets the build's parallelism (default 1).
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from mutations import MUTATIONS  # noqa: E402

HARNESS = """cmake_minimum_required(VERSION 3.21)
project(remat_mutation LANGUAGES CXX)
set(REMAT_ENABLE_CUDA OFF CACHE BOOL "" FORCE)
set(REMAT_NATIVE_ARCH OFF CACHE BOOL "" FORCE)
add_subdirectory(${REMAT_SRC} remat)
find_package(Catch2 3 QUIET)
if(NOT Catch2_FOUND)
  find_package(Catch2 2.13 REQUIRED)
endif()
find_package(nlohmann_json 3 REQUIRED)
add_executable(mutant ${MUTANT_SOURCES})
target_include_directories(mutant PRIVATE ${REMAT_SRC}/tests)
target_link_libraries(mutant PRIVATE remat::remat nlohmann_json::nlohmann_json Catch2::Catch2WithMain)
"""


def sh(cmd, log, timeout=None, cwd=None):
    with open(log, "w") as f:
        try:
            return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout,
                                  cwd=cwd).returncode
        except subprocess.TimeoutExpired:
            return "timeout"


def sync_copy(dst):
    """Copies the working tree's files (tracked and untracked, not ignored) into dst, only
    those whose bytes differ, so the build reuses what did not change."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, check=True, capture_output=True).stdout
    for rel in filter(None, out.decode().split("\0")):
        src, d = os.path.join(ROOT, rel), os.path.join(dst, rel)
        if not os.path.isfile(src):
            continue
        with open(src, "rb") as f:
            data = f.read()
        if os.path.isfile(d):
            with open(d, "rb") as f:
                if f.read() == data:
                    continue
        os.makedirs(os.path.dirname(d), exist_ok=True)
        with open(d, "wb") as f:
            f.write(data)


def failed_tests(junit):
    """Names of the failed test cases in a Catch2 JUnit report."""
    try:
        root = ET.parse(junit).getroot()
    except (ET.ParseError, FileNotFoundError):
        return []
    names = []
    for tc in root.iter("testcase"):
        if tc.find("failure") is not None or tc.find("error") is not None:
            name = tc.get("name", "?")  # Catch2 adds "/<section>" for sections
            if name not in names:
                names.append(name)
    return names


class Runner:
    def __init__(self, work, jobs, existing_only):
        self.src = os.path.join(work, "src")
        self.build = os.path.join(work, "build")
        self.harness = os.path.join(work, "harness")
        self.logs = os.path.join(work, "logs")
        self.jobs = jobs
        self.existing_only = existing_only
        for d in (self.src, self.build, self.harness, self.logs):
            os.makedirs(d, exist_ok=True)
        sync_copy(self.src)
        with open(os.path.join(self.harness, "CMakeLists.txt"), "w") as f:
            f.write(HARNESS)

    def sources(self, tests):
        if self.existing_only:
            tests = [t for t in tests if "test_mutations_" not in t]
        return [os.path.join(self.src, "tests", t) for t in tests]

    def build_and_run(self, tests, tag):
        """Builds the binary of `tests` and runs it; returns (status, failed test names)
        with status 'pass', 'fail', 'build failed' or 'timeout'."""
        srcs = self.sources(tests)
        if not srcs:
            return "no tests", []
        log = os.path.join(self.logs, tag)
        rc = sh(["cmake", "-S", self.harness, "-B", self.build, "-DCMAKE_BUILD_TYPE=Release",
                 "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG", "-DREMAT_SRC=" + self.src,
                 "-DMUTANT_SOURCES=" + ";".join(srcs)], log + ".configure.log")
        if rc != 0:
            return "build failed", []
        rc = sh(["cmake", "--build", self.build, "-j", str(self.jobs)], log + ".build.log")
        if rc != 0:
            return "build failed", []
        junit = log + ".junit.xml"
        if os.path.exists(junit):
            os.remove(junit)
        env_log = log + ".run.log"
        # in the work directory: some tests write files beside them
        rc = sh([os.path.join(self.build, "mutant"), "-r", "junit", "-o", junit], env_log,
                timeout=600, cwd=self.logs)
        if rc == "timeout":
            return "timeout", []
        return ("pass" if rc == 0 else "fail"), failed_tests(junit)

    def mutate(self, m):
        path = os.path.join(self.src, m["file"])
        with open(path) as f:
            original = f.read()
        if original.count(m["find"]) != 1:
            raise SystemExit("mutation %s: its text occurs %d times in %s (expected once): update "
                             "tests/mutation/mutations.py" % (m["id"], original.count(m["find"]), m["file"]))
        line = original[: original.index(m["find"])].count("\n") + 1
        with open(path, "w") as f:
            f.write(original.replace(m["find"], m["replace"]))
        try:
            status, names = self.build_and_run(m["tests"], m["id"])
        finally:  # the copy is restored whatever happened
            with open(path, "w") as f:
                f.write(original)
        return line, status, names


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated mutation ids")
    ap.add_argument("--list", action="store_true", help="print the mutations and exit")
    ap.add_argument("--existing-only", action="store_true",
                    help="leave out the tests written for this pass (tests/*/test_mutations_*.cpp)")
    ap.add_argument("--workdir", default=os.path.join(ROOT, "build-mutation"),
                    help="where the copy and its build live (default: build-mutation)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip checking that the unmutated tests pass")
    args = ap.parse_args()
    muts = MUTATIONS
    if args.only:
        want = args.only.split(",")
        unknown = [w for w in want if w not in {m["id"] for m in MUTATIONS}]
        if unknown:
            raise SystemExit("unknown mutation ids: %s (see --list)" % ", ".join(unknown))
        muts = [m for m in MUTATIONS if m["id"] in want]
    if args.list:
        for m in muts:
            print("%-28s %s: %s" % (m["id"], m["file"], m["what"]))
        return 0
    # SIGTERM/SIGHUP unwind like Ctrl-C, so the finally blocks restore the copy.
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    r = Runner(os.path.abspath(args.workdir), args.jobs, args.existing_only)
    if not args.no_baseline:
        all_tests = sorted({t for m in muts for t in m["tests"]})
        t0 = time.time()
        status, names = r.build_and_run(all_tests, "baseline")
        print("baseline (no mutation, %d test files): %s in %.0f s%s" % (
            len(r.sources(all_tests)), status, time.time() - t0, (": " + ", ".join(names)) if names else ""))
        if status != "pass":
            print("the tests fail without a mutation: fix that first (logs in %s)" % r.logs)
            return 2
    rows, killed = [], 0
    for m in muts:
        t0 = time.time()
        line, status, names = r.mutate(m)
        if status == "fail":
            verdict = "killed"
            killed += 1
            by = "; ".join(names[:3]) + (" (+%d)" % (len(names) - 3) if len(names) > 3 else "")
            if not names:
                by = "(the binary failed outside a test case)"
        elif status in ("timeout", "build failed"):
            verdict, by = status, "see %s/%s.*" % (r.logs, m["id"])
        else:
            verdict, by = "SURVIVED", ""
        rows.append((m, line, verdict, by))
        print("%-28s %-9s %4.0f s  %s" % (m["id"], verdict, time.time() - t0, by), flush=True)
    print()
    print("| mutation | file:line | what | result | killed by |")
    print("|---|---|---|---|---|")
    for m, line, verdict, by in rows:
        print("| %s | %s:%d | %s | %s | %s |" % (m["id"], m["file"].replace("include/remat/", ""), line,
                                                m["what"], verdict, by))
    print()
    print("killed %d of %d (%.0f%%)%s" % (killed, len(rows), 100.0 * killed / max(1, len(rows)),
                                          " (tests of this pass left out)" if args.existing_only else ""))
    return 0 if killed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
