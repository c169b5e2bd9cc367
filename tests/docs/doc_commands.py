#!/usr/bin/env python3
"""The documentation, checked (CTest label `docs`): every shell command in
README.md and docs/*.md runs, on small data; every file and link they name
exists; every sweep example's --array range matches its file.

    doc_commands.py --repo DIR --build DIR --workdir DIR [--file README.md] [--list]

Commands: every fenced block whose info string is sh (or bash, shell) runs
as one bash script (set -e -o pipefail) in WORKDIR/scratch, which links
build/, configs/, scripts/, docs/ and tests/ of the repository, so the
commands run as written from the repository root, while what they write
(runs/, plots, plan.json) stays in the scratch directory. SYNCOPT_BIN is
the build's binary (scripts/run.sh then builds nothing), Open MPI may run
as root and oversubscribe, and blocks run in the order of the pages, so
that a later block reads the runs an earlier one made.

An HTML comment just before a block, invisible on the rendered page, says
how to run it (several may be stacked):

    <!-- doc-test: skip: REASON -->      not run (SLURM, GPUs, several hosts, minutes)
    <!-- doc-test: scaled: ARGS -->      ARGS appended to every line that runs syncopt
                                         train/simulate/plan or scripts/run.sh
    <!-- doc-test: env: K=V ... -->      environment for the block
    <!-- doc-test: instead: COMMANDS --> a scaled-down variant, run in the block's place
    <!-- doc-test: exit: N -->           the block must end with status N (default 0)
    <!-- doc-test: layout CONFIG -->     (before a text block) it must be what
                                         `syncopt train CONFIG --dry-run` prints of
                                         params.f32's order

Files: a relative Markdown link must name a file (and a heading) of the
repository; a backquoted path under apps/ bench/ cmake/ configs/ cuda/
docs/ lib/ scripts/ tests/ must exist; no page may cite DESIGN.md, which
is not in the repository. PENDING lists files that other branches add.
"""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

# Files that pages link to and other branches are writing: reported, not
# failed, until they exist (then they must be removed from here).
PENDING = {}
REPO_DIRS = ("apps", "bench", "cmake", "configs", "cuda", "docs", "lib", "scripts", "tests")
RUNS_SYNCOPT = re.compile(r"(?:\bsyncopt|build/syncopt|\$SYNCOPT_BIN)\s+(?:train|simulate|plan)\b"
                          r"|scripts/run\.sh\b")
MARKER = re.compile(r"^<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^```(\S*)\s*$")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
TICKED = re.compile(r"`([^`\s]+)`")
ARRAY = re.compile(r"--array=0-(\d+)\b.*?(\S+\.txt)\b")


class Block:
    def __init__(self, page, line, lang, text, markers):
        self.page, self.line, self.lang, self.text, self.markers = page, line, lang, text, markers

    def where(self):
        return f"{self.page}:{self.line}"


def parse(page, text):
    """The fenced blocks of a page with the markers before each."""
    blocks, markers, lines = [], [], text.split("\n")
    i = 0
    while i < len(lines):
        m = MARKER.match(lines[i])
        f = FENCE.match(lines[i])
        if m:
            markers.append(m.group(1))
        elif f:
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            blocks.append(Block(page, i + 1, f.group(1), "\n".join(lines[i + 1:j]), markers))
            markers = []
            i = j
        elif lines[i].strip():
            markers = []
        i += 1
    return blocks


def marker(block, name):
    """The value of marker `name` ("skip: x" -> "x"), or None."""
    for m in block.markers:
        key, _, value = m.partition(":") if not m.startswith("layout ") else ("layout", "", m[7:])
        if key.strip() == name:
            return value.strip()
    return None


def split_comment(line):
    """(command, comment) of a shell line: a # that starts a word, outside quotes."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i:]
    return line.rstrip(), ""


def scale(text, args):
    """Appends args to every logical line that runs syncopt or run.sh."""
    out, logical = [], []
    for line in text.split("\n"):
        logical.append(line)
        if line.rstrip().endswith("\\"):
            continue
        whole = "\n".join(logical)
        if RUNS_SYNCOPT.search(whole):
            cmd, comment = split_comment(logical[-1])
            logical[-1] = f"{cmd} {args}" + (f"   {comment}" if comment else "")
        out.extend(logical)
        logical = []
    out.extend(logical)
    return "\n".join(out)


def slug(heading):
    """GitHub's anchor of a heading."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    with open(path) as f:
        return {slug(line.lstrip("#")) for line in f if line.startswith("#")}


class Checker:
    def __init__(self, repo, build):
        self.repo, self.build, self.failures, self.notes = repo, build, [], []

    def fail(self, msg):
        self.failures.append(msg)
        print("FAIL", msg, flush=True)

    def check_files(self, page, text):
        here = os.path.dirname(os.path.join(self.repo, page))
        in_fence = False
        for n, line in enumerate(text.split("\n"), 1):
            if line.startswith("```"):
                in_fence = not in_fence
            if "DESIGN.md" in line:
                self.fail(f"{page}:{n}: cites DESIGN.md, which is not in the repository "
                          "(docs/design.md is)")
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue
                path, _, anchor = target.partition("#")
                full = os.path.normpath(os.path.join(here, path)) if path else \
                    os.path.join(self.repo, page)
                rel = os.path.relpath(full, self.repo)
                if rel in PENDING and not os.path.exists(full):
                    self.notes.append(f"{page}:{n}: links {rel}, not in the repository yet: "
                                      f"{PENDING[rel]}")
                    continue
                if not os.path.exists(full):
                    self.fail(f"{page}:{n}: link to {target}: no such file ({rel})")
                elif anchor and full.endswith(".md") and anchor not in anchors(full):
                    self.fail(f"{page}:{n}: link to {target}: no heading '#{anchor}' in {rel}")
            if in_fence:
                continue
            for token in TICKED.findall(line):
                token = token.rstrip(".,:;")
                if not token.startswith(tuple(d + "/" for d in REPO_DIRS)):
                    continue
                if re.search(r"[<>*{}$|]|\.\.\.|=", token):
                    continue
                if token in PENDING and not os.path.exists(os.path.join(self.repo, token)):
                    continue
                if not os.path.exists(os.path.join(self.repo, token.rstrip("/"))):
                    self.fail(f"{page}:{n}: `{token}` is not in the repository")

    def check_arrays(self, path, text):
        for n, line in enumerate(text.split("\n"), 1):
            for last, sweep in ARRAY.findall(line):
                full = os.path.join(self.repo, sweep)
                if not os.path.exists(full):
                    continue  # a file the example makes up (two-runs.txt)
                # Outside SLURM sweep.sbatch lists the runs (grid lines expanded).
                env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
                env["SYNCOPT_BIN"] = os.path.join(self.build, "syncopt")
                out = subprocess.run(["bash", os.path.join(self.repo, "scripts/slurm/sweep.sbatch"),
                                      full], capture_output=True, text=True, env=env,
                                     cwd=self.repo)
                m = re.search(r"--array=0-(\d+)", out.stdout)
                if not m:
                    self.fail(f"{path}:{n}: sweep.sbatch could not list {sweep}: {out.stderr}")
                elif m.group(1) != last:
                    self.fail(f"{path}:{n}: --array=0-{last} for {sweep}, which has "
                              f"{int(m.group(1)) + 1} runs (--array=0-{m.group(1)})")

    def check_layout(self, block, env, scratch):
        config = marker(block, "layout")
        out = subprocess.run(["build/syncopt", "train", config, "--dry-run"], cwd=scratch, env=env,
                             capture_output=True, text=True, timeout=120)
        got = out.stdout[out.stdout.find("# params.f32"):].rstrip("\n")
        if out.returncode != 0 or got != block.text.rstrip("\n"):
            self.fail(f"{block.where()}: the parameter order differs from `syncopt train {config} "
                      f"--dry-run` (exit {out.returncode}):\n{got}")
        else:
            print(f"ok   {block.where()}: params.f32 order of {config} as --dry-run prints it")


def scratch_dir(workdir, repo, build):
    scratch = os.path.join(workdir, "scratch")
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    for name in ("configs", "scripts", "docs", "tests"):
        os.symlink(os.path.join(repo, name), os.path.join(scratch, name))
    os.symlink(build, os.path.join(scratch, "build"))
    return scratch


def run_block(checker, block, env, scratch, timeout):
    script = marker(block, "instead")
    if script is None:
        script = block.text
        args = marker(block, "scaled")
        if args:
            script = scale(script, args)
    want = int(marker(block, "exit") or 0)
    benv = dict(env)
    for kv in shlex.split(marker(block, "env") or ""):
        k, _, v = kv.partition("=")
        benv[k] = v
    t0 = time.time()
    try:
        out = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=scratch, env=benv,
                             capture_output=True, text=True, timeout=timeout)
        rc, output = out.returncode, out.stdout + out.stderr
    except subprocess.TimeoutExpired as e:
        rc, output = "timeout", (e.stdout or b"").decode(errors="replace")
    secs = time.time() - t0
    if rc != want:
        checker.fail(f"{block.where()}: exit {rc} (want {want}) after {secs:.1f}s running:\n"
                     f"{script}\n--- output (last 3000 chars) ---\n{output[-3000:]}")
    else:
        first = script.strip().split("\n")[0][:90]
        print(f"ok   {block.where()}: {secs:5.1f}s  {first}", flush=True)
    return secs


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--build", required=True, help="the build directory (holds syncopt)")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--file", action="append", help="only these pages (relative to --repo)")
    ap.add_argument("--list", action="store_true", help="list the blocks and what is done to them")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per block")
    args = ap.parse_args()
    repo, build = os.path.abspath(args.repo), os.path.abspath(args.build)
    pages = args.file or (["README.md"] + sorted(
        os.path.join("docs", f) for f in os.listdir(os.path.join(repo, "docs")) if f.endswith(".md")))

    checker = Checker(repo, build)
    for rel in PENDING:
        if os.path.exists(os.path.join(repo, rel)):
            checker.fail(f"{rel} exists now: remove it from PENDING in tests/docs/doc_commands.py")
    blocks = []
    for page in pages:
        with open(os.path.join(repo, page)) as f:
            text = f.read()
        checker.check_files(page, text)
        checker.check_arrays(page, text)
        blocks += parse(page, text)
    for extra in ["scripts/slurm/train.sbatch", "scripts/slurm/sweep.sbatch"] + sorted(
            os.path.join("configs/sweeps", f) for f in os.listdir(os.path.join(repo, "configs/sweeps"))):
        with open(os.path.join(repo, extra)) as f:
            checker.check_arrays(extra, f.read())

    shell = [b for b in blocks if b.lang in ("sh", "bash", "shell")]
    layouts = [b for b in blocks if marker(b, "layout") is not None]
    if args.list:
        for b in shell:
            how = ("skip: " + marker(b, "skip")) if marker(b, "skip") is not None else \
                "instead" if marker(b, "instead") is not None else \
                ("scaled: " + marker(b, "scaled")) if marker(b, "scaled") else "as written"
            print(f"{b.where()}: {how}")
        return 0

    os.makedirs(args.workdir, exist_ok=True)
    scratch = scratch_dir(os.path.abspath(args.workdir), repo, build)
    env = dict(os.environ)
    env.update({"SYNCOPT_BIN": os.path.join(build, "syncopt"),
                "PATH": build + os.pathsep + env.get("PATH", ""),
                "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                "OMPI_MCA_rmaps_base_oversubscribe": "1", "MPLBACKEND": "Agg"})
    ran, skipped, total = 0, [], 0.0
    for b in shell:
        reason = marker(b, "skip")
        if reason is not None:
            if not reason:
                checker.fail(f"{b.where()}: a skip without a reason")
            skipped.append(f"{b.where()}: {reason}")
            continue
        total += run_block(checker, b, env, scratch, args.timeout)
        ran += 1
    for b in layouts:
        checker.check_layout(b, env, scratch)

    print(f"\n{ran} command blocks run in {total:.0f}s, {len(skipped)} skipped:")
    for s in skipped:
        print("  skip", s)
    for n in checker.notes:
        print("NOTE", n)
    if checker.failures:
        print(f"FAILED: {len(checker.failures)} problem(s) in the documentation")
        return 1
    print(f"OK: {len(pages)} pages, their commands, files and links")
    return 0


if __name__ == "__main__":
    sys.exit(main())
