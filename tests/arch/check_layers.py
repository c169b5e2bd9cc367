#!/usr/bin/env python3
"""The folder dependency rules of syncopt, checked on every build (CTest
label `arch`): who may include whom, no cycles, and no CUDA in lib/.

    python3 tests/arch/check_layers.py [--graph] [SOURCE_DIR]

Each lib/<folder> may include headers of the folders listed for it below,
and nothing above it; cuda/ may use lib/ but lib/ never uses cuda/. A new
folder must be added to LAYERS, with its place in the order. --graph prints
the include graph that was found (folder -> folders it includes).
"""
import os
import re
import sys

# folder -> the folders it may include (besides itself). Order: lower first.
LAYERS = {
    "common": set(),
    "checkpoint": {"common"},
    "comm": {"common"},
    "nn": {"common"},
    # the config holds a model's layer list (nn/layer.hpp); nn never reads the config.
    "config": {"common", "nn"},
    "data": {"common", "config", "checkpoint"},
    "optim": {"common", "config", "checkpoint"},
    "metrics": {"common", "config"},
    "layout": {"common", "config"},
    # The run directory's life: created and locked, run.json, the outcome file
    # and the ending claim, the keys a resume may change. train builds on it,
    # never the reverse.
    "rundir": {"common", "config", "checkpoint", "comm", "layout", "metrics"},
    "replica": {"common", "checkpoint", "comm", "nn", "optim"},
    "ps": {"common", "config", "checkpoint", "comm", "layout", "metrics", "optim"},
    "worker": {"common", "config", "checkpoint", "comm", "data", "layout", "nn"},
    "sim": {"common", "config", "checkpoint", "layout", "metrics", "ps", "worker"},
    "plan": {"common", "config", "layout", "metrics", "sim", "worker"},
    "train": {"common", "config", "checkpoint", "comm", "data", "layout", "metrics", "nn",
              "optim", "ps", "replica", "rundir", "sim", "worker"},
    # cuda/ builds on the compute, replica and communication interfaces of lib/.
    "cuda": {"common", "checkpoint", "comm", "nn", "optim", "replica"},
}
CUDA_HEADERS = re.compile(r'#include\s*[<"](cuda|cudnn|cublas|nccl|syncopt_cuda/)[^>"]*[>"]')
INCLUDE = re.compile(r'#include\s+"([^"]+)"')


def folder_of(root, path):
    rel = os.path.relpath(path, root).split(os.sep)
    if rel[0] == "lib":
        return rel[1]
    return "cuda" if rel[0] == "cuda" else None


def scan(root):
    graph, problems = {}, []
    for top in ("lib", "cuda"):
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if not f.endswith((".hpp", ".cpp", ".cu", ".cuh")):
                    continue
                path = os.path.join(d, f)
                src = folder_of(root, path)
                text = open(path, encoding="utf-8").read()
                if top == "lib" and CUDA_HEADERS.search(text):
                    problems.append(f"{os.path.relpath(path, root)}: lib/ includes a CUDA header")
                for inc in INCLUDE.findall(text):
                    parts = inc.split("/")
                    if len(parts) < 2:
                        continue
                    dst = "cuda" if parts[0] == "syncopt_cuda" else parts[0]
                    if dst == src or (dst not in LAYERS and dst != "cuda"):
                        continue
                    graph.setdefault(src, set()).add(dst)
                    if src not in LAYERS:
                        problems.append(f"lib/{src}: a folder that tests/arch/check_layers.py "
                                        "does not know; add it to LAYERS")
                    elif dst not in LAYERS[src]:
                        problems.append(f"{os.path.relpath(path, root)} includes \"{inc}\": "
                                        f"{src}/ may not depend on {dst}/")
    return graph, problems


def cycles(graph):
    found, state = [], {}

    def visit(node, stack):
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                found.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def main(argv):
    show = "--graph" in argv
    args = [a for a in argv if a != "--graph"]
    root = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "..")
    graph, problems = scan(root)
    problems += [f"dependency cycle: {c}" for c in cycles(graph)]
    if show:
        for src in sorted(graph):
            print(f"{src:11s} -> {', '.join(sorted(graph[src]))}")
    for p in sorted(set(problems)):
        print(f"layering: {p}", file=sys.stderr)
    if problems:
        return 1
    print(f"layering: {len(graph)} folders, every include points down, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
