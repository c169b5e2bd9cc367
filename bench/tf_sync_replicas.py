#!/usr/bin/env python3
"""TensorFlow's own sync SGD with backup workers, as the peer of syncopt.

Chen et al. 2016 ("Revisiting Distributed Synchronous SGD") is implemented in
TensorFlow as `tf.compat.v1.train.SyncReplicasOptimizer`: workers push their
gradient into per-variable ConditionalAccumulators on the parameter servers,
the chief applies the mean of the first `replicas_to_aggregate` fresh ones
(stale ones, computed at an older global step, are dropped) and hands out
tokens that start the next step. This script runs it as a local cluster on
127.0.0.1: one process per PS task and per worker task (default 1 PS,
5 workers, aggregate 4, i.e. one backup worker), each a
`tf.compat.v1.train.Server` on its own free port, graph mode, variables placed
by `replica_device_setter`.

Model, data and optimiser match syncopt's reference run: conv3x3(32,SAME)-relu-
maxpool2, conv3x3(64,SAME)-relu-maxpool2, fc(256)-relu, fc(10), softmax
cross-entropy, weight normalisation on every layer (w = g * v / ||v|| per
output unit), SGD momentum 0.9, Fashion-MNIST standardised with the train
mean/std, worker k training on shard k of a seeded permutation.

What is measured (on the chief): the chief runs the aggregation op itself, one
`sess.run` per global update, so it stamps the wall-clock time of every
update. Updates 1..10 are warm-up; the median interval and examples/s
(updates * replicas_to_aggregate * batch / seconds) cover updates 10..N.
The chief stops aggregating at exactly N updates, reads the final variables
from the PS and measures test accuracy on the 10000 test images.

The last stdout line is `TF_RESULT {json}`. Usage:
    python3 bench/tf_sync_replicas.py --updates 300 --batch 32
The launcher imports no TensorFlow; it spawns the tasks (this same file with
--role), waits for the workers, then kills the PS (a TF1 server never returns
from join()). Every child is killed on any error or timeout.
"""
import argparse
import gzip
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

kDataDir = "/usr/share/datasets/fashion-mnist"
kWarmupUpdates = 10
kEvalBatch = 1000
# One sess.run may legitimately block while slower workers catch up; past this
# it means a task died, and blocking forever would hang the benchmark.
kRunTimeoutMs = 300_000


# ---------------------------------------------------------------------------
# Data (numpy only)
# ---------------------------------------------------------------------------

def read_idx(path):
    """IDX file (gzip) -> uint8 array of the shape stored in its header."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    import numpy as np
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def pixel_mean_std(images_u8):
    """Exact mean/std over every pixel of a uint8 array, via a 256-bin histogram
    (avoids a float64 copy of the whole training set in each of the tasks)."""
    import numpy as np
    counts = np.bincount(images_u8.reshape(-1), minlength=256).astype(np.float64)
    values = np.arange(256, dtype=np.float64)
    n = counts.sum()
    mean = float((counts * values).sum() / n)
    var = float((counts * (values - mean) ** 2).sum() / n)
    return mean, var ** 0.5


def standardise(images_u8, mean, std):
    """uint8 [n, 28, 28] -> float32 [n, 28, 28, 1] (NHWC: TF's CPU conv layout)."""
    import numpy as np
    return ((images_u8.astype(np.float32) - mean) / std)[..., None]


def load_train_shard(task, workers, seed):
    """This worker's shard (task k of `workers`) of a seeded permutation of the
    60000 training images, standardised with the mean/std of the full set."""
    import numpy as np
    images = read_idx(os.path.join(kDataDir, "train-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(kDataDir, "train-labels-idx1-ubyte.gz"))
    mean, std = pixel_mean_std(images)
    perm = np.random.RandomState(seed).permutation(images.shape[0])
    shard = np.array_split(perm, workers)[task]
    return standardise(images[shard], mean, std), labels[shard].astype(np.int64), (mean, std)


def load_test(mean, std):
    import numpy as np
    images = read_idx(os.path.join(kDataDir, "t10k-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(kDataDir, "t10k-labels-idx1-ubyte.gz"))
    return standardise(images, mean, std), labels.astype(np.int64)


# ---------------------------------------------------------------------------
# Model (TF1 graph ops; no Keras)
# ---------------------------------------------------------------------------

def init_params(seed):
    """Initial values, drawn in numpy so every task builds the same constants
    (only the chief's initialiser runs, but the graphs must agree).
    v ~ He normal (std sqrt(2/fan_in); sqrt(1/fan_in) for the logits layer),
    g = ||v|| per output unit so that w = v at start, b = 0."""
    import numpy as np
    rng = np.random.RandomState(seed)
    shapes = [("conv1", (3, 3, 1, 32), 2.0), ("conv2", (3, 3, 32, 64), 2.0),
              ("fc1", (7 * 7 * 64, 256), 2.0), ("fc2", (256, 10), 1.0)]
    params = []
    for name, shape, gain in shapes:
        fan_in = int(np.prod(shape[:-1]))
        v = (rng.standard_normal(shape) * np.sqrt(gain / fan_in)).astype(np.float32)
        axes = tuple(range(len(shape) - 1))
        g = np.sqrt((v.astype(np.float64) ** 2).sum(axis=axes)).astype(np.float32)
        b = np.zeros(shape[-1], np.float32)
        params.append((name, v, g, b))
    return params


def make_variables(tf, seed):
    """Trainable v, g, b per layer -> list of (name, v, g, b) tf.Variables."""
    out = []
    for name, v0, g0, b0 in init_params(seed):
        with tf.compat.v1.variable_scope(name):
            v = tf.compat.v1.get_variable("v", initializer=v0)
            g = tf.compat.v1.get_variable("g", initializer=g0)
            b = tf.compat.v1.get_variable("b", initializer=b0)
        out.append((name, v, g, b))
    return out


def wn_weight(tf, v, g):
    """Weight normalisation. v: [..., out], g: [out] -> w = g * v / ||v||, the
    norm taken per output unit (over every axis but the last)."""
    axes = list(range(len(v.shape) - 1))
    return v * (g / tf.sqrt(tf.reduce_sum(tf.square(v), axis=axes)))


def logits_of(tf, layers, x):
    """x: [n, 28, 28, 1] float32 -> logits [n, 10]."""
    (_, v1, g1, b1), (_, v2, g2, b2), (_, v3, g3, b3), (_, v4, g4, b4) = layers
    h = tf.nn.conv2d(x, wn_weight(tf, v1, g1), strides=1, padding="SAME") + b1
    h = tf.nn.max_pool2d(tf.nn.relu(h), ksize=2, strides=2, padding="VALID")   # [n,14,14,32]
    h = tf.nn.conv2d(h, wn_weight(tf, v2, g2), strides=1, padding="SAME") + b2
    h = tf.nn.max_pool2d(tf.nn.relu(h), ksize=2, strides=2, padding="VALID")   # [n,7,7,64]
    h = tf.reshape(h, [-1, 7 * 7 * 64])
    h = tf.nn.relu(tf.matmul(h, wn_weight(tf, v3, g3)) + b3)                    # [n,256]
    return tf.matmul(h, wn_weight(tf, v4, g4)) + b4                             # [n,10]


# ---------------------------------------------------------------------------
# Tasks (run in child processes)
# ---------------------------------------------------------------------------

def import_tf(threads):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads,
                                      inter_op_parallelism_threads=threads)
    return tf, config


def run_ps(args, cluster):
    tf, config = import_tf(args.threads)
    server = tf.compat.v1.train.Server(tf.train.ClusterSpec(cluster), job_name="ps",
                                       task_index=args.task, config=config)
    print(f"[ps {args.task}] serving on {cluster['ps'][args.task]}", flush=True)
    server.join()  # never returns; the launcher kills this process


def run_worker(args, cluster):
    import numpy as np
    tf, config = import_tf(args.threads)
    task, workers = args.task, len(cluster["worker"])
    is_chief = task == 0
    server = tf.compat.v1.train.Server(tf.train.ClusterSpec(cluster), job_name="worker",
                                       task_index=task, config=config)
    # Talk only to the PS tasks and ourselves, so no task waits for (or keeps
    # depending on) the other workers.
    config.device_filters.extend(["/job:ps", f"/job:worker/task:{task}"])

    x_train, y_train, (mean, std) = load_train_shard(task, workers, args.seed)
    rng = np.random.RandomState(args.seed * 1000 + task)

    setter = tf.compat.v1.train.replica_device_setter(
        worker_device=f"/job:worker/task:{task}", cluster=tf.train.ClusterSpec(cluster))
    with tf.compat.v1.device(setter):
        global_step = tf.compat.v1.train.get_or_create_global_step()
        layers = make_variables(tf, args.seed)
        x = tf.compat.v1.placeholder(tf.float32, [None, 28, 28, 1], name="x")
        y = tf.compat.v1.placeholder(tf.int64, [None], name="y")
        logits = logits_of(tf, layers, x)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.int64))
        opt = tf.compat.v1.train.SyncReplicasOptimizer(
            tf.compat.v1.train.MomentumOptimizer(args.lr, momentum=0.9),
            replicas_to_aggregate=args.replicas_to_aggregate, total_num_replicas=workers)
        train_op = opt.minimize(loss, global_step=global_step)
        # The aggregation step (take the first R fresh gradients, apply, bump the
        # global step, hand out tokens). The hook would run it from a
        # QueueRunner thread; the chief runs it itself to stamp each update
        # and to stop at exactly --updates.
        sync_op = opt.get_chief_queue_runner().enqueue_ops[0]
        init_tokens_op = opt.get_init_tokens_op(-1)        # what the hook does
        release_tokens_op = opt.get_init_tokens_op(4 * workers)
        global_init = tf.compat.v1.global_variables_initializer()
        local_init = tf.compat.v1.local_variables_initializer()
        var_list = tf.compat.v1.trainable_variables()

    run_opts = tf.compat.v1.RunOptions(timeout_in_ms=kRunTimeoutMs)
    sess = tf.compat.v1.Session(server.target, config=config)
    if is_chief:
        sess.run(global_init)
        sess.run(local_init)
        sess.run(opt.chief_init_op)
        sess.run(init_tokens_op)
    else:
        # Wait (polling briefly, not SessionManager's 30 s) for the chief's init.
        deadline = time.time() + kRunTimeoutMs / 1000
        while sess.run(opt.ready_for_local_init_op).size:
            if time.time() > deadline:
                raise RuntimeError("chief never initialised the variables")
            time.sleep(0.05)
        sess.run(local_init)
        sess.run(opt.local_step_init_op)
    print(f"[worker {task}] ready", flush=True)

    stamps = []            # chief: perf_counter() after global update k is stamps[k]
    done = threading.Event()
    sync_error = []

    def aggregate():
        """Chief only: exactly --updates global updates, then release every
        worker blocked on the token queue so that it sees the end and exits."""
        try:
            stamps.append(time.perf_counter())
            for _ in range(args.updates):
                sess.run(sync_op, options=run_opts)
                stamps.append(time.perf_counter())
        except Exception as e:  # reported by the main thread
            sync_error.append(repr(e))
        finally:
            done.set()
            try:
                sess.run(release_tokens_op, options=run_opts)
            except Exception as e:
                sync_error.append(repr(e))

    if is_chief:
        thread = threading.Thread(target=aggregate, daemon=True)
        thread.start()

    n = x_train.shape[0]
    order, pos, local_steps = rng.permutation(n), 0, 0
    t_start = time.perf_counter()
    while True:
        if pos + args.batch > n:
            order, pos = rng.permutation(n), 0
        idx = order[pos:pos + args.batch]
        pos += args.batch
        sess.run(train_op, feed_dict={x: x_train[idx], y: y_train[idx]}, options=run_opts)
        local_steps += 1
        if is_chief:
            if done.is_set():
                break
        elif sess.run(global_step) >= args.updates:
            break
    loop_s = time.perf_counter() - t_start
    print(f"[worker {task}] stopped after {local_steps} local steps", flush=True)
    # Gradients computed by this task (the launcher sums them: the surplus over
    # updates * R is what the backup workers cost).
    with open(f"{args.result_file}.steps{task}", "w") as f:
        f.write(str(local_steps))

    if not is_chief:
        sess.close()
        return None

    thread.join(timeout=kRunTimeoutMs / 1000)
    if sync_error:
        raise RuntimeError("aggregation failed: " + "; ".join(sync_error))
    final_step = int(sess.run(global_step))
    # Accuracy of the final variables (no update can happen any more: only
    # this process runs the aggregation op).
    x_test, y_test = load_test(mean, std)
    hits = 0
    for i in range(0, x_test.shape[0], kEvalBatch):
        hits += int(sess.run(correct, feed_dict={x: x_test[i:i + kEvalBatch],
                                                  y: y_test[i:i + kEvalBatch]}))
    accuracy = hits / x_test.shape[0]
    last_loss = float(sess.run(loss, feed_dict={x: x_test[:kEvalBatch], y: y_test[:kEvalBatch]}))
    sess.close()

    intervals = [b - a for a, b in zip(stamps[kWarmupUpdates:], stamps[kWarmupUpdates + 1:])]
    timed_updates = len(intervals)
    timed_s = stamps[-1] - stamps[kWarmupUpdates] if timed_updates else None
    return {
        "tf_version": tf.__version__,
        "workers": workers,
        "ps_tasks": len(cluster["ps"]),
        "replicas_to_aggregate": args.replicas_to_aggregate,
        "batch": args.batch,
        "lr": args.lr,
        "threads": args.threads,
        "updates": final_step,
        "warmup_updates": kWarmupUpdates,
        "timed_updates": timed_updates,
        "median_update_s": statistics.median(intervals) if intervals else None,
        "examples_per_s": (timed_updates * args.replicas_to_aggregate * args.batch / timed_s)
                          if timed_updates else None,
        "train_s": stamps[-1] - stamps[0],
        "chief_local_steps": local_steps,
        "chief_loop_s": loop_s,
        "test_accuracy": accuracy,
        "test_loss_first1000": last_loss,
    }


def task_main(args):
    cluster = json.loads(args.cluster)
    try:
        if args.role == "ps":
            run_ps(args, cluster)
        else:
            result = run_worker(args, cluster)
            if result is not None:
                with open(args.result_file, "w") as f:
                    json.dump(result, f)
    except BaseException as e:
        print(f"[{args.role} {args.task}] failed: {e!r}", file=sys.stderr, flush=True)
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    # TF1 servers have no shutdown; skip interpreter teardown so the task
    # cannot hang on its gRPC threads.
    os._exit(0)


# ---------------------------------------------------------------------------
# Launcher
# ---------------------------------------------------------------------------

def free_ports(count):
    """`count` distinct free TCP ports on 127.0.0.1 (held together while chosen)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def die_with_parent():
    """preexec_fn: the kernel kills the task if the launcher dies (even by
    SIGKILL), so no orphaned TF server keeps its port. Linux only."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def tail(path, n=25):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def launch(args):
    ports = free_ports(args.ps_tasks + args.workers)
    cluster = {"ps": [f"127.0.0.1:{p}" for p in ports[:args.ps_tasks]],
               "worker": [f"127.0.0.1:{p}" for p in ports[args.ps_tasks:]]}
    tmp = tempfile.mkdtemp(prefix="tf-sync-replicas-")
    result_file = os.path.join(tmp, "result.json")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="",
               OMP_NUM_THREADS=str(args.threads))
    procs = {}   # name -> (Popen, log path)

    def spawn(role, task):
        log = os.path.join(tmp, f"{role}{task}.log")
        cmd = [sys.executable, os.path.abspath(__file__), "--role", role, "--task", str(task),
               "--cluster", json.dumps(cluster), "--result-file", result_file,
               "--updates", str(args.updates), "--batch", str(args.batch), "--lr", str(args.lr),
               "--replicas-to-aggregate", str(args.replicas_to_aggregate),
               "--threads", str(args.threads), "--seed", str(args.seed)]
        with open(log, "w") as f:
            procs[f"{role}{task}"] = (subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT,
                                                       env=env, stdin=subprocess.DEVNULL,
                                                       preexec_fn=die_with_parent), log)

    def kill_all():
        for p, _ in procs.values():
            if p.poll() is None:
                p.kill()
        for p, _ in procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    print(f"tf_sync_replicas: cluster {json.dumps(cluster)}; logs in {tmp}", flush=True)
    t0 = time.perf_counter()
    try:
        for i in range(args.ps_tasks):
            spawn("ps", i)
        for i in range(args.workers):
            spawn("worker", i)
        deadline = time.time() + args.timeout
        workers = [k for k in procs if k.startswith("worker")]
        while True:
            for k in list(procs):
                rc = procs[k][0].poll()
                if rc not in (None, 0) or (k.startswith("ps") and rc is not None):
                    raise RuntimeError(f"task {k} exited with code {rc}; its log:\n"
                                       + tail(procs[k][1]))
            if all(procs[k][0].poll() == 0 for k in workers):
                break
            if time.time() > deadline:
                raise RuntimeError(f"timed out after {args.timeout} s; worker0 log:\n"
                                   + tail(procs["worker0"][1]))
            time.sleep(0.2)
        wall_s = time.perf_counter() - t0
    except BaseException:
        kill_all()
        raise
    kill_all()   # the PS tasks (their server never returns)

    with open(result_file) as f:
        result = json.load(f)
    result["wall_s"] = wall_s
    steps = []
    for i in range(args.workers):
        with open(f"{result_file}.steps{i}") as f:
            steps.append(int(f.read()))
    result["worker_local_steps"] = steps
    result["gradients_computed"] = sum(steps)
    result["gradients_applied"] = result["updates"] * args.replicas_to_aggregate
    shutil.rmtree(tmp, ignore_errors=True)   # logs are kept only when a run fails
    med = result["median_update_s"]
    print(f"TensorFlow {result['tf_version']} SyncReplicasOptimizer: {args.ps_tasks} PS, "
          f"{args.workers} workers, aggregate {args.replicas_to_aggregate} "
          f"({args.workers - args.replicas_to_aggregate} backup), batch {args.batch}, "
          f"{args.threads} thread(s) per task")
    print(f"  global updates        {result['updates']}")
    print(f"  median update interval {med * 1e3:.1f} ms (updates {kWarmupUpdates}..{result['updates']})"
          if med is not None else "  median update interval n/a (too few updates)")
    if result["examples_per_s"] is not None:
        print(f"  examples/s            {result['examples_per_s']:.1f}")
    print(f"  training time         {result['train_s']:.1f} s; total wall {wall_s:.1f} s")
    print(f"  gradients             {result['gradients_computed']} computed, "
          f"{result['gradients_applied']} applied (per worker {steps})")
    print(f"  test accuracy         {result['test_accuracy']:.4f}")
    print("TF_RESULT " + json.dumps(result), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--updates", type=int, default=300, help="global updates to train for")
    ap.add_argument("--batch", type=int, default=32, help="per-worker batch")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--workers", type=int, default=5, help="total worker tasks (N + b)")
    ap.add_argument("--replicas-to-aggregate", type=int, default=4, help="N")
    ap.add_argument("--ps-tasks", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="intra/inter-op threads per task")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=3600, help="seconds before giving up")
    # internal: set by the launcher for its children
    ap.add_argument("--role", choices=["ps", "worker"], help=argparse.SUPPRESS)
    ap.add_argument("--task", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--cluster", help=argparse.SUPPRESS)
    ap.add_argument("--result-file", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role:
        task_main(args)
        return
    if not (1 <= args.replicas_to_aggregate <= args.workers) or args.ps_tasks < 1:
        sys.exit("tf_sync_replicas: need 1 <= --replicas-to-aggregate <= --workers, --ps-tasks >= 1")
    if args.updates < 1 or args.batch < 1:
        sys.exit("tf_sync_replicas: --updates and --batch must be positive")
    try:
        launch(args)
    except KeyboardInterrupt as e:
        sys.exit(f"tf_sync_replicas: interrupted ({e})")
    except RuntimeError as e:
        sys.exit(f"tf_sync_replicas: {e}")


if __name__ == "__main__":
    main()
