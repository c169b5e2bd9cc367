#!/usr/bin/env python3
"""Checks what one dry run of scripts/gpu-check.sh reported (tests/gpu-pack/dry_run.sh).

--expect pass: the run on a bare image without a GPU must
- end with verdict dry-run-passed and exit 0, leaving exactly its five files
  (gpu-check.log, summary.json, summary.txt, bench.json, cudnn.log: the
  device tool brings back at most 8);
- have run every step in the check's order, each with the status a machine
  without a GPU must give: the machine survey, the bundle, the versions, the
  launcher and cuda_logic passed; the CUDA tests, one step per tag, and the
  NCCL tests skipped (77, never passed), NCCL with NCCL_DEBUG=WARN and
  NCCL_CUMEM_HOST_ENABLE=0, nccl_np2's first try failed on purpose
  (SYNCOPT_GPU_CHECK_FAIL_FIRST) and its retry without the latter recorded; both training runs (CPU backend) and the benchmark passed; the
  memory check, whose stand-in never finishes, inconclusive;
- have loaded the CUDA libraries from the emulated wheels, every other
  library from the carry or the base runtime (nothing of the hidden system);
- have kept the carried LD_LIBRARY_PATH away from Python (the benchmark's
  own environment), and rewritten bench.json with each batch, largest first,
  going on past the planted batch 0, which fails;
- have streamed the steps' output into the log as it came (a step's lines
  carry more than one time stamp).
--expect missing-lib=NAME: the run on a carry without NAME must fail (exit
1) at the bundle step, naming NAME, and stop there; that run has no xz
(bare_image.sh BARE_HIDE_XZ=1), so it unpacks with python3's lzma.
"""
import argparse
import json
import os
import re
import sys

CUDA_GROUPS = ["cuda_kernels", "cuda_model", "cuda_graph", "cuda_replica", "cuda_sync",
               "cuda_rest"]
ORDER = ["env", "bundle", "versions", "launcher", "cuda_logic", *CUDA_GROUPS, "nccl_np1",
         "nccl_np2", "nccl_np4", "sync_fmnist", "allreduce_fmnist", "bench", "memcheck"]
STATUS = {"env": "passed", "bundle": "passed", "versions": "passed", "launcher": "passed",
          "cuda_logic": "passed", **{g: "skipped" for g in CUDA_GROUPS}, "nccl_np1": "skipped",
          "nccl_np2": "skipped", "nccl_np4": "skipped", "sync_fmnist": "passed",
          "allreduce_fmnist": "passed", "bench": "passed", "memcheck": "inconclusive"}
# Libraries every image has: a carried binary may take them from the system
# (libstdbuf is coreutils' stdbuf, which the check puts in front of each step).
BASE = re.compile(r"^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|"
                  r"libutil|libgcc_s|libstdc\+\+|libstdbuf)\.so")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rc", type=int, required=True)
    ap.add_argument("--scratch", required=True, help="bare_image.sh's SCRATCH (the wheels)")
    ap.add_argument("--work", required=True, help="the check's work folder (the bundle)")
    ap.add_argument("--expect", required=True)
    a = ap.parse_args()
    problems = []

    def need(cond, what):
        if not cond:
            problems.append(what)
        return cond

    try:
        with open(os.path.join(a.out, "summary.json")) as f:
            s = json.load(f)
    except Exception as e:
        print(f"FAIL: no readable summary.json in {a.out}: {e}")
        return 1
    steps = {st["name"]: st for st in s["steps"]}
    names = [st["name"] for st in s["steps"]]

    if a.expect.startswith("missing-lib="):
        lib = a.expect.split("=", 1)[1]
        need(a.rc == 1, f"exit code {a.rc}, expected 1")
        need(s["verdict"] == "failed", f"verdict {s['verdict']}, expected failed")
        b = steps.get("bundle", {})
        need(b.get("status") == "failed" and lib in b.get("detail", ""),
             f"the bundle step does not fail naming {lib}: {b}")
        need("python3's lzma" in b.get("detail", ""),
             f"the bundle was not unpacked with python3's lzma without xz: {b.get('detail')}")
        need("launcher" not in steps and "cuda_kernels" not in steps,
             f"steps ran past a bundle that cannot load: {names}")
    elif a.expect == "pass":
        need(a.rc == 0, f"exit code {a.rc}, expected 0")
        need(s["verdict"] == "dry-run-passed", f"verdict {s['verdict']}, expected dry-run-passed")
        need(sorted(os.listdir(a.out)) ==
             ["bench.json", "cudnn.log", "gpu-check.log", "summary.json", "summary.txt"],
             f"files in the output folder: {sorted(os.listdir(a.out))}")
        need(names == ORDER, f"steps {names}, expected {ORDER}")
        for name, want in STATUS.items():
            got = steps.get(name, {}).get("status")
            need(got == want, f"step {name}: {got}, expected {want} "
                              f"({steps.get(name, {}).get('detail', '')[:300]})")
        site = os.path.join(a.scratch, "site", "nvidia")
        bundle = os.path.join(a.work, "bundle")
        libs = s["machine"].get("cuda_libraries", {})
        for so in ["libcudart.so.13", "libcublas.so.13", "libcudnn.so.9", "libnccl.so.2"]:
            need((libs.get(so) or "").startswith(site), f"the survey found {so} at {libs.get(so)}")
        loaded = (steps.get("versions", {}).get("data") or {}).get("loaded", [])
        need(len(loaded) > 10, f"syncopt_cuda_versions listed {len(loaded)} loaded objects")
        for p in loaded:
            base = os.path.basename(p)
            if any(k in base for k in ("libcudart", "libcublas", "libcudnn", "libnccl")):
                need(p.startswith(site), f"{base} loaded from {p}, not the wheels")
            elif not BASE.match(base):
                need(os.path.realpath(p).startswith(bundle),
                     f"{base} loaded from {p}: neither the carry nor the base runtime")
        try:
            with open(os.path.join(a.out, "bench.json")) as f:
                bench = json.load(f)
        except Exception as e:
            bench = {}
            need(False, f"bench.json unreadable: {e}")
        need([r["batch"] for r in bench.get("results", [])] == [64, 0, 16],
             f"bench.json batches {[r.get('batch') for r in bench.get('results', [])]}, "
             "expected [64, 0, 16] (the order given, past the failed 0)")
        need(bench.get("failed_batches") == [0] and
             [("error" in r) for r in bench.get("results", [])] == [False, True, False],
             f"bench.json: failed batches {bench.get('failed_batches')}, expected [0] alone")
        n1, n2 = steps.get("nccl_np1", {}), steps.get("nccl_np2", {})
        need("first try" not in n1.get("detail", ""), f"nccl_np1 was retried: {n1.get('detail')}")
        need("retry without NCCL_CUMEM_HOST_ENABLE=0" in n2.get("detail", "") and
             "on purpose" in n2.get("detail", ""),
             f"nccl_np2's planted first failure and its retry are not recorded: {n2.get('detail')}")
        ld = bench.get("python_ld_library_path") or ""
        need(bundle not in ld and "wrap" not in ld,
             f"Python ran with the carried LD_LIBRARY_PATH: {ld}")
        need(os.path.basename(bench.get("exe", "")) == "syncopt" and "/wrap/" in bench.get("exe", ""),
             f"the benchmark ran {bench.get('exe')}, not syncopt's wrapper")
        # Streaming: the benchmark's lines reached the log at several moments.
        with open(os.path.join(a.out, "gpu-check.log")) as f:
            log = f.read()
        need(re.search(r"nccl_np4 \(limit \d+s\): env NCCL_DEBUG=WARN NCCL_CUMEM_HOST_ENABLE=0 ",
                       log) is not None, "nccl_np4 did not run with NCCL_DEBUG and NCCL_CUMEM_HOST_ENABLE")
        for g in CUDA_GROUPS:
            need(re.search(rf"\] {g} \(limit \d+s\): \S+syncopt_cuda_tests --durations yes \S", log)
                 is not None, f"step {g} did not run syncopt_cuda_tests with its tag filter")
        m = re.search(r"\n== \[ *\d+s\] bench .*?\n(.*?)\n   -> bench:", log, re.S)
        stamps = set(re.findall(r"^\[ *(\d+)s\]", m.group(1), re.M)) if m else set()
        need(len(stamps) >= 2, f"the benchmark's output reached the log at {len(stamps)} moment(s) "
                               "(buffered until it ended?)")
        need("CANNOT WORK" not in open(os.path.join(a.out, "summary.txt")).read(),
             "summary.txt says something cannot work")
    else:
        print(f"FAIL: unknown --expect {a.expect}")
        return 1
    for p in problems:
        print(f"FAIL: {p}")
    if not problems:
        print(f"ok: dry run ({a.expect}) as expected")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
