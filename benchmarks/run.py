"""Runs every workload of shared/bench/WORKLOADS.md in mxfn and in the peers (MXNet 1.9.1 always,
PyTorch where its venv exists) in one run, and prints the table with the ratios mxfn / peer.

usage: python benchmarks/run.py [WORKLOAD ...]
Peers come from ../shared/bench (or benchmarks/peers) and their venvs from .venv-peers/
(benchmarks/setup_peers.sh mxnet [torch]). Ratios are "better than 1 = mxfn ahead": for
latency and memory (lower is better) the ratio is peer / mxfn. mlp-b100 is also run alone per
system to report its peak resident memory (row mlp-b100-peak-rss).
"""

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ALL = ["mlp-b100", "mlp-b10", "lenet-b100", "predict-b1000", "latency-b1", "gemm-1024"]


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


def main(which):
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
    mine = next((s for s in systems if s.startswith("mxfn")), None)
    head = f"{'workload':<14}" + "".join(f"{s:>22}" for s in systems)
    head += "".join(f"{'mxfn/' + s.split('-')[0]:>14}" for s in systems if s != mine)
    print(head)
    for w in which:
        row = results.get(w, {})
        unit = next((r["unit"] for r in row.values()), "")
        line = f"{w:<14}" + "".join(f"{row[s]['value']:>16.1f} {unit:<5}" if s in row else f"{'-':>22}" for s in systems)
        for s in systems:
            if s == mine:
                continue
            if mine in row and s in row and row[s]["value"] > 0:
                r = row[mine]["value"] / row[s]["value"]
                if unit in ("us", "MB"):
                    r = 1 / r  # lower is better
                line += f"{r:>14.2f}"
            else:
                line += f"{'-':>14}"
        print(line)


if __name__ == "__main__":
    main(sys.argv[1:] or ALL)
