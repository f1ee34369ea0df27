"""Time per layer of one zoo inference workload, mxfn (mx.profiler) beside ONNX Runtime (its
own profiler, benchmarks/peers/ort_layers.py in the onnxruntime peer venv), matched by node
name: MXNet's exporter keeps the names, and ORT names a fused node after its last member (a
Convolution with its BatchNorm and ReLU: the ReLU's name, plus `_nchwc` in its blocked layout),
which the symbol's graph maps back to the Convolution mxfn reports. Sorted by what each layer
costs mxfn beyond ORT.
usage: python zoo_layers.py [--batch N] [--top K] MODEL"""

import json
import os
import subprocess
import sys

import mxfn.profiler as profiler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo_models as z  # noqa: E402
from zoo_profile import profile_inference  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def producers(name):
    """Node name → the Convolution (or other layer) whose output it maps in place: a
    BatchNorm or activation after a layer, followed through its first input."""
    with open(os.path.join(z.cache_dir(), name + "-symbol.json")) as f:
        nodes = json.load(f)["nodes"]
    passive = {"BatchNorm", "Activation", "relu", "clip"}

    def source(i):
        while nodes[i]["op"] in passive and nodes[i]["inputs"]:
            i = nodes[i]["inputs"][0][0]
        return nodes[i]["name"]

    return {n["name"]: source(i) for i, n in enumerate(nodes) if n["op"] != "null"}


def ort_nodes(name, batch):
    py = os.path.join(ROOT, ".venv-peers", "onnxruntime", "bin", "python")
    script = os.path.join(ROOT, "benchmarks", "peers", "ort_layers.py")
    out = subprocess.run([py, script, name, str(batch)], check=True, capture_output=True, text=True)
    source = producers(name)
    nodes = {}
    for n, op, ms in json.loads(out.stdout)["nodes"]:
        n = source.get(n.removesuffix("_nchwc"), n)
        prev = nodes.get(n, (op, 0.0))
        nodes[n] = (prev[0], prev[1] + ms)
    return nodes


def mxfn_layers(name, batch, calls=5):
    profile_inference(name, batch, calls)
    layers = {}
    for layer, op, phase, n, ms in profiler.rows()["layers"]:
        if phase == "forward":
            layers[layer] = (op, ms / n)
    profiler.reset()
    return layers


def main(argv):
    batch = int(argv[argv.index("--batch") + 1]) if "--batch" in argv else 1
    top = int(argv[argv.index("--top") + 1]) if "--top" in argv else 25
    skip = {argv[argv.index(f) + 1] for f in ("--batch", "--top") if f in argv}
    name = [a for a in argv if not a.startswith("--") and a not in skip][0]
    ours = mxfn_layers(name, batch)
    theirs = ort_nodes(name, batch)
    both = sorted(set(ours) & set(theirs), key=lambda n: theirs[n][1] - ours[n][1])
    total_ours, total_theirs = sum(v[1] for v in ours.values()), sum(v[1] for v in theirs.values())
    print(f"== {name} b{batch}: mxfn {total_ours:.2f} ms in {len(ours)} layers, "
          f"ORT {total_theirs:.2f} ms in {len(theirs)} nodes ({len(both)} matched)")
    print(f"   {'layer':<44} {'mxfn op':<16} {'mxfn ms':>8} {'ORT op':<14} {'ORT ms':>8} {'ORT/mxfn':>8}")
    for n in both[:top]:
        (op, ms), (top_, tms) = ours[n], theirs[n]
        print(f"   {n:<44} {op:<16} {ms:>8.3f} {top_:<14} {tms:>8.3f} {tms / ms if ms else 0:>8.2f}")
    rest_ours = {n: v for n, v in ours.items() if n not in theirs}
    rest_theirs = {n: v for n, v in theirs.items() if n not in ours}
    for who, rest in (("mxfn", rest_ours), ("ORT", rest_theirs)):
        by_op = {}
        for op, ms in rest.values():
            by_op[op] = by_op.get(op, 0.0) + ms
        items = sorted(by_op.items(), key=lambda kv: -kv[1])[:8]
        print(f"   unmatched {who}: " + ", ".join(f"{op} {ms:.2f}" for op, ms in items))


if __name__ == "__main__":
    main(sys.argv[1:])
