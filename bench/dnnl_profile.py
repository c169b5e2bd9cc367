#!/usr/bin/env python3
"""Where a syncopt run's oneDNN time goes, primitive by primitive.

Reads the output of a run made with DNNL_VERBOSE=1 (oneDNN prints one
`onednn_verbose,exec,...` line per primitive it executes, with the time in
ms) and sums the times per primitive kind and direction, then per primitive
and shape (which names the layer: `mb32_ic16oc16_ih28...` is a 16-channel
3x3 conv on 28x28 at batch 32). Time outside oneDNN (the hand-written loops:
weight norm, dropout, the loss, the optimiser) is not in these lines: compare
the total with the run's train_s, or use `perf record` / `perf report`.

    DNNL_VERBOSE=1 build/syncopt train configs/bench-cnn.toml --quiet \\
        --set model.name=resnet20 --set train.steps=40 > log.txt
    bench/dnnl_profile.py log.txt [--top 25]

The verbose printing itself slows the run: use it for shares, not speed.
"""
import argparse
import collections
import signal
import sys


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    total, count = collections.Counter(), collections.Counter()
    # onednn_verbose,exec,cpu,<primitive>,<impl>,<prop>,<descs>,<attrs>,<aux>,<problem>,<ms>
    with open(args.log) as f:
        for line in f:
            if not line.startswith("onednn_verbose,exec"):
                continue
            fields = line.rstrip().split(",")
            key = (fields[3], fields[5], fields[4], fields[-2])
            total[key] += float(fields[-1])
            count[key] += 1
    all_ms = sum(total.values())
    if all_ms == 0:
        sys.exit(f"{args.log}: no onednn_verbose exec lines (run with DNNL_VERBOSE=1)")
    kinds = collections.Counter()
    for (prim, prop, _, _), ms in total.items():
        kinds[(prim, prop)] += ms
    print(f"oneDNN time: {all_ms:.1f} ms")
    for (prim, prop), ms in kinds.most_common():
        print(f"  {prim:22s} {prop:18s} {ms:9.1f} ms {100 * ms / all_ms:5.1f}%")
    print(f"top {args.top} primitives (ms, calls, kind, direction, implementation, shape):")
    for key, ms in total.most_common(args.top):
        prim, prop, impl, problem = key
        print(f"  {ms:8.1f} {count[key]:6d}  {prim:20s} {prop:17s} {impl:24s} {problem}")


if __name__ == "__main__":
    main()
