"""Runs every workload of shared/bench/WORKLOADS.md in mxfn and in the peers (MXNet 1.9.1 always,
PyTorch where its venv exists) in one run, and prints the table with the ratios mxfn / peer.

usage: python benchmarks/run.py [--quick] [classic | zoo | lstm | WORKLOAD | ZOO_MODEL ...]
With no names: the classic workloads, then the zoo (issue #12: model-zoo CNNs exported by MXNet
1.9.1, inference at batch 1 and 16 against MXNet and ONNX Runtime, training steps against MXNet;
see zoo_models.py), then the LSTM language model (issue #13: examples/lstm_bucketing.py's model
on the KJV, training target tokens/s and one-verse latency against MXNet's fused RNN and
PyTorch; see lstm_models.py). "classic", "zoo" or "lstm" runs one section; workload ids pick classic workloads,
zoo model names (resnet18_v2, ...) pick zoo models. --quick: the zoo with two models, one
training model and three timed calls each (for development).
Peers come from ../shared/bench (or benchmarks/peers) and their venvs from .venv-peers/
(benchmarks/setup_peers.sh mxnet [torch] [onnxruntime]); the zoo's peer scripts are in
benchmarks/peers, its exported models in ~/.cache/mxfn-bench/zoo ($MXFN_BENCH_CACHE), made on
first use by peers/zoo_export.py in the MXNet venv. Ratios are "better than 1 = mxfn ahead": for
latency and memory (lower is better) the ratio is peer / mxfn. mlp-b100 is also run alone per
system to report its peak resident memory (row mlp-b100-peak-rss).
Behind a zoo ratio: zoo_profile.py (mxfn's time per operator) and zoo_layers.py (per layer,
beside ONNX Runtime's own profile of the same network).
"""

import json
import os
import subprocess
import sys
import tempfile

import lstm_models
import zoo_models

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ALL = ["mlp-b100", "mlp-b10", "lenet-b100", "predict-b1000", "latency-b1", "gemm-1024"]
SECTIONS = ("classic", "zoo", "lstm")


def _peer_dir():
    for d in (os.path.join(ROOT, "..", "shared", "bench", "peers"), os.path.join(HERE, "peers")):
        if os.path.isdir(d):
            return d
    return None


def run(cmd, env=None):
    """Runs a benchmark script: its JSON rows, and its peak resident memory in MB (the child's
    own rusage from wait4, not a sum over every child this script ran)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        print(f"# {' '.join(cmd[:2])} failed:\n{stderr[-2000:]}", file=sys.stderr)
    rows = []
    for line in stdout.splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass
    return rows, usage.ru_maxrss / 1024  # Linux reports KB


def _venv_python(name):
    py = os.path.join(ROOT, ".venv-peers", name, "bin", "python")
    return py if os.path.exists(py) else None


def zoo(args):
    """The zoo section: exports what the cache lacks (MXNet venv), runs mxfn and the peers, and
    prints the table (ms per call; ratios peer / mxfn, above 1 = mxfn faster)."""
    quick, models, train = zoo_models.parse_args(args)
    mxnet_py, ort_py = _venv_python("mxnet"), _venv_python("onnxruntime")
    cache = zoo_models.cache_dir()
    wanted = [f"{n}{suffix}" for n in models
              for suffix in ("-symbol.json", "-0000.params", *(f"-b{b}.onnx" for b in zoo_models.BATCHES))]
    if not all(os.path.exists(os.path.join(cache, f)) for f in wanted):
        if mxnet_py is None:
            print("# zoo: the models are exported by MXNet 1.9.1: run benchmarks/setup_peers.sh mxnet",
                  file=sys.stderr)
            return
        run([mxnet_py, os.path.join(HERE, "peers", "zoo_export.py"), cache, *models])
    flags = ["--quick"] if quick else []
    jobs = [[sys.executable, os.path.join(HERE, "zoo.py"), *flags, *models]]
    if mxnet_py:
        jobs.append([mxnet_py, os.path.join(HERE, "peers", "mxnet_zoo.py"), *flags, *models])
    if ort_py:
        jobs.append([ort_py, os.path.join(HERE, "peers", "ort_zoo.py"), *flags, *models])
    results, systems = collect(jobs)
    which = [zoo_models.workload(n, b) for n in models for b in zoo_models.BATCHES]
    which += [zoo_models.workload(n, zoo_models.TRAIN_BATCH, train=True) for n in train]
    table(which, results, systems, width=32)


def collect(jobs, env=None):
    """Runs each benchmark command: ``({workload: {system: row}}, systems in order of appearance)``."""
    results, systems = {}, []
    for cmd in jobs:
        rows, _ = run(cmd, env)
        for row in rows:
            results.setdefault(row["workload"], {})[row["system"]] = row
            if row["system"] not in systems:
                systems.append(row["system"])
    return results, systems


def lstm():
    """The LSTM language-model section: mxfn, MXNet (fused RNN) and PyTorch where their venvs
    exist, one process each; training in target (non-padding) tokens/s, latency in ms."""
    jobs = [[sys.executable, os.path.join(HERE, "lstm.py")]]
    for name in ("mxnet", "torch"):
        py = _venv_python(name)
        if py:
            jobs.append([py, os.path.join(HERE, "peers", f"{name}_lstm.py")])
    results, systems = collect(jobs)
    table(list(lstm_models.WORKLOADS), results, systems, width=20)


def main(args):
    quick = "--quick" in args
    names = [a for a in args if not a.startswith("--")]
    zoo_names = [n for n in names if n in zoo_models.MODELS]
    which = [n for n in names if n in ALL] + (ALL if "classic" in names else [])
    unknown = [n for n in names if n not in ALL and n not in zoo_models.MODELS and n not in SECTIONS]
    if unknown:
        sys.exit(f"run.py: unknown workload or model {unknown}; workloads {ALL}, zoo models "
                 f"{list(zoo_models.MODELS)}, sections {', '.join(SECTIONS)}")
    if not names:
        which = ALL
    if which:
        classic(which)
    if not names or "zoo" in names or zoo_names:
        zoo([*(["--quick"] if quick else []), *zoo_names])
    if not names or "lstm" in names:
        lstm()


def classic(which):
    env = dict(os.environ, MXFN_MNIST_DIR=os.path.join(ROOT, "data", "mnist"))
    results = {w: {} for w in which}
    systems = []
    jobs = [("mxfn", [sys.executable, os.path.join(HERE, "mxfn_bench.py"), *which])]
    peers = _peer_dir()
    for name in ("mxnet", "torch"):
        py = os.path.join(ROOT, ".venv-peers", name, "bin", "python")
        if peers and os.path.exists(py):
            jobs.append((name, [py, os.path.join(peers, f"{name}_bench.py"), *which]))
    for label, cmd in jobs:
        rows, _ = run(cmd, env)
        for row in rows:
            results.setdefault(row["workload"], {})[row["system"]] = row
            if row["system"] not in systems:
                systems.append(row["system"])
    if "mlp-b100" in which:
        # Peak memory of mlp-b100 training alone (one process per system: data + 2 epochs).
        for label, cmd in jobs:
            rows, peak = run([*cmd[:2], "mlp-b100"], env)
            if rows:
                system = rows[0]["system"]
                results.setdefault("mlp-b100-peak-rss", {})[system] = {"value": peak, "unit": "MB"}
                if "rss_per_epoch_mb" in rows[0]:
                    print(f"# {system} mlp-b100 resident MB after each epoch: {rows[0]['rss_per_epoch_mb']}")
        which = [*which, "mlp-b100-peak-rss"]
    table(which, results, systems)


def table(which, results, systems, width=14):
    """One line per workload: each system's figure, then mxfn against each peer (better than 1
    = mxfn ahead; for us, ms and MB, lower is better, so the ratio is peer / mxfn)."""
    mine = next((s for s in systems if s.startswith("mxfn")), None)
    head = f"{'workload':<{width}}" + "".join(f"{s:>22}" for s in systems)
    head += "".join(f"{'mxfn/' + s.split('-')[0]:>18}" for s in systems if s != mine)
    print(head)
    for w in which:
        row = results.get(w, {})
        unit = next((r["unit"] for r in row.values()), "")
        digits = 2 if unit == "ms" else 1
        line = f"{w:<{width}}" + "".join(f"{row[s]['value']:>13.{digits}f} {unit:<8}" if s in row else f"{'-':>22}"
                                         for s in systems)
        for s in systems:
            if s == mine:
                continue
            if mine in row and s in row and row[s]["value"] > 0:
                r = row[mine]["value"] / row[s]["value"]
                if unit in ("us", "ms", "MB"):
                    r = 1 / r  # lower is better
                line += f"{r:>18.2f}"
            else:
                line += f"{'-':>18}"
        print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
