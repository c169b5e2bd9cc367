#!/usr/bin/env python3
"""scripts/syncopt_runs.py on real runs made by the binary: a local run and a
sync run under mpirun (1 parameter server, 2 workers, so gradients are
dropped or accepted).

    test_syncopt_runs.py SYNCOPT lists    the tables as lists of dicts (pandas hidden)
                                          equal, row by row, to `syncopt export --csv`
    test_syncopt_runs.py SYNCOPT frames   the same as pandas DataFrames (77 without pandas)
    test_syncopt_runs.py SYNCOPT mlflow   export_mlflow's store read back by MLflow's own
                                          client (77 without mlflow)
Exit 0 pass, 1 fail, 77 skip.
"""
import csv
import importlib
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
EXE, CASE = sys.argv[1], sys.argv[2]
FAILS = []


def check(cond, what):
    """Prints the first line of `what`; the rest only when the check fails."""
    head, _, detail = what.partition("\n")
    print(("ok   " if cond else "FAIL ") + head)
    if not cond:
        if detail:
            print(detail)
        FAILS.append(head)


def make_runs(tmp):
    common = [os.path.join(ROOT, "configs/smoke.toml"), "--set", "model.name=mlp",
              "--set", "train.steps=30", "--set", "eval.every_steps=10",
              "--set", "run.tensorboard=false"]
    p = subprocess.run([EXE, "train"] + common + ["--set", "run.name=local"], cwd=tmp,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    p = subprocess.run(["timeout", "-k", "10", "240", "mpirun", "-np", "3", EXE, "train"] + common +
                       ["--set", "run.name=sync", "--set", "train.mode=sync",
                        "--set", "train.backups=1"], cwd=tmp, capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    return [os.path.join(tmp, "runs", n) for n in ("local", "sync")]


def same(a, b):
    """A CSV cell against a JSON value."""
    if isinstance(b, bool):
        return a in (str(b).lower(), str(int(b)))
    if isinstance(b, (int, float)):
        try:
            return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-12)
        except ValueError:
            return False
    return a == str(b)


def against_csv(rows, path, what):
    with open(path) as f:
        want = list(csv.DictReader(f))
    check(len(rows) == len(want) and len(rows) > 0, f"{what}: {len(rows)} rows, the CSV {len(want)}")
    bad = [(i, k) for i, (r, w) in enumerate(zip(rows, want)) for k in w
           if k in r and not isinstance(r[k], (list, dict)) and not same(w[k], r[k])]
    missing = sorted({k for w in want[:1] for k in w if not any(k in r for r in rows[:1])})
    check(not bad, f"{what}: every cell equals syncopt export's {bad[:3]}")
    check(not missing, f"{what}: every CSV column is a field {missing}")


def case_lists(tmp):
    sys.modules["pandas"] = None  # as without pandas: import fails
    import syncopt_runs
    dirs = make_runs(tmp)
    for d in dirs:
        p = subprocess.run([EXE, "export", d, "--csv"], capture_output=True, text=True)
        check(p.returncode == 0, f"syncopt export {d} --csv")
        run = syncopt_runs.load(d)
        check(run.status == "completed", f"{run.name}: completed ({run.why})")
        steps, grads, evals = run.steps_table(), run.grads_table(), run.evals_table()
        check(all(isinstance(t, list) for t in (steps, grads, evals)), f"{run.name}: lists without pandas")
        against_csv(steps, os.path.join(d, "csv/steps.csv"), f"{run.name} steps")
        if run.name == "sync":
            against_csv(grads, os.path.join(d, "csv/grads.csv"), f"{run.name} grads")
            check(any(not g["accepted"] for g in grads), "sync b = 1: some gradient dropped")
            check(sum(s["dropped"] for s in steps) == sum(1 for g in grads if not g["accepted"]),
                  "steps' dropped counts the grads not accepted")
        against_csv(evals, os.path.join(d, "csv/eval.csv"), f"{run.name} evals")
        check(run.summary.get("status") == "completed" and run.run_json.get("run_id"),
              f"{run.name}: summary and run.json as dicts")
        check(run.config["train"]["steps"] == 30, f"{run.name}: config.toml as a dict")
        try:
            run.steps_table(as_frame=True)
            check(False, "as_frame=True without pandas is an error")
        except syncopt_runs.RunError as e:
            check("pandas is not installed" in str(e), f"as_frame=True without pandas: {e}")
    both = syncopt_runs.evals_table(syncopt_runs.load_runs(dirs))
    check({r["run"] for r in both} == {"local", "sync"}, "evals_table of two runs has a run column")


def case_frames(tmp):
    try:
        import pandas
    except ImportError:
        print("SKIP: pandas is not installed for", sys.executable,
              "(scripts/setup.sh --tests installs it)")
        sys.exit(77)
    import syncopt_runs
    for d in make_runs(tmp):
        run = syncopt_runs.load(d)
        for name in ("steps_table", "grads_table", "evals_table"):
            frame = getattr(run, name)()
            rows = getattr(run, name)(as_frame=False)
            check(isinstance(frame, pandas.DataFrame), f"{run.name} {name}: a DataFrame")
            back = frame.to_dict("records")
            ok = len(back) == len(rows) and all(
                all(k in b and (b[k] == v or (isinstance(v, float) and math.isclose(b[k], v)))
                    for k, v in r.items() if not isinstance(v, (list, dict)))
                for r, b in zip(rows, back))
            check(ok, f"{run.name} {name}: the frame holds the rows ({len(back)})")
    frame = syncopt_runs.load(os.path.join(tmp, "runs/sync")).grads_table()
    check(set(frame["worker"]) == {0, 1}, "grads frame: both workers")


def case_mlflow(tmp):
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # MLflow 3 reads file stores only when asked
    try:
        from mlflow import MlflowClient
    except ImportError:
        print("SKIP: mlflow is not installed for", sys.executable,
              "(scripts/setup.sh --tests installs mlflow-skinny)")
        sys.exit(77)
    import syncopt_runs
    runs = syncopt_runs.load_runs(make_runs(tmp))
    store = os.path.join(tmp, "mlruns")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts/syncopt_runs.py"), "mlflow",
                        *[r.path for r in runs], "--to", store, "--experiment", "exp1"],
                       capture_output=True, text=True)
    check(p.returncode == 0, f"syncopt_runs.py mlflow exits 0\n{p.stdout}{p.stderr}")
    ids = [syncopt_runs.export_mlflow(r, store, "exp1") for r in runs]  # again: replaces
    client = MlflowClient(tracking_uri="file:" + store)
    exp = client.get_experiment_by_name("exp1")
    check(exp is not None, "MLflow finds the experiment")
    found = client.search_runs([exp.experiment_id])
    check(len(found) == 2, f"two runs in it, a second export replacing the first ({len(found)})")
    for run, run_id in zip(runs, ids):
        m = client.get_run(run_id)
        check(m.info.status == "FINISHED" and m.info.run_name == run.name,
              f"{run.name}: status {m.info.status}, name {m.info.run_name}")
        check(m.data.params.get("train.mode") == run.config["train"]["mode"] and
              float(m.data.params["optim.lr"]) == run.config["optim"]["lr"] and
              m.data.params.get("train.steps") == "30",
              f"{run.name}: config keys as params ({len(m.data.params)})")
        loss = client.get_metric_history(run_id, "loss")
        want = [(r["step"], r["loss"]) for r in run.shard0]
        check(sorted((h.step, h.value) for h in loss) == want,
              f"{run.name}: loss history = shard 0's records ({len(loss)} points)")
        acc = client.get_metric_history(run_id, "test_acc_ema")
        check(sorted((h.step, h.value) for h in acc) ==
              [(e["step"], e["test_acc_ema"]) for e in run.evals],
              f"{run.name}: test_acc_ema history = eval.jsonl ({len(acc)} points)")
        check(m.data.metrics.get("summary.test_acc") == run.summary["test_acc"],
              f"{run.name}: summary.test_acc")
        check(m.data.tags.get("syncopt.status") == "completed", f"{run.name}: tags")
        arts = {a.path for a in client.list_artifacts(run_id)}
        check({"config.toml", "run.json", "summary.json"} <= arts, f"{run.name}: artifacts {arts}")


if __name__ == "__main__":
    cases = {"lists": case_lists, "frames": case_frames, "mlflow": case_mlflow}
    with tempfile.TemporaryDirectory(prefix="syncopt-runs-") as t:
        cases[CASE](t)
    if FAILS:
        print(f"{len(FAILS)} check(s) failed")
        sys.exit(1)
    print("all checks passed")
