"""Exports the zoo models with MXNet 1.9.1 (run in the MXNet peer venv): for each Gluon model-zoo
network, random init, hybridize, one forward, ``export`` → ``{cache}/{model}-symbol.json`` and
``{cache}/{model}-0000.params``; then MXNet's own ONNX exporter (``mx.onnx.export_model``, needs
onnx==1.14.1) → ``{cache}/{model}-b{batch}.onnx`` for each inference batch size (weights
moved out of the graph inputs, see ``_initializers_not_inputs``). Files that
exist are kept. usage: zoo_export.py CACHE_DIR [MODEL ...]
"""

import os
import sys

import mxnet as mx
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from zoo_models import BATCHES, MODELS  # noqa: E402


def export(cache, name, size):
    prefix = os.path.join(cache, name)
    sym_file, params_file = prefix + "-symbol.json", prefix + "-0000.params"
    if not (os.path.exists(sym_file) and os.path.exists(params_file)):
        mx.random.seed(0)
        net = mx.gluon.model_zoo.vision.get_model(name, pretrained=False)
        net.initialize(mx.init.Xavier())
        net.hybridize()
        net(mx.nd.random.uniform(shape=(1, 3, size, size)))
        net.export(prefix, epoch=0)
    for b in BATCHES:
        onnx_file = f"{prefix}-b{b}.onnx"
        if os.path.exists(onnx_file):
            continue
        sym, arg, aux = mx.model.load_checkpoint(prefix, 0)
        params = {**arg, **aux}
        mx.onnx.export_model(sym, params, in_shapes=[(b, 3, size, size)], in_types=[np.float32],
                             onnx_file_path=onnx_file + ".tmp")
        _initializers_not_inputs(onnx_file + ".tmp")
        os.replace(onnx_file + ".tmp", onnx_file)


def _initializers_not_inputs(path):
    """MXNet 1.9.1's exporter lists every weight among the graph inputs too, which keeps ONNX
    Runtime from treating them as constants (no constant folding, no BatchNorm folding; it
    warns and names its remove_initializer_from_input tool). Done here, as that tool does, so
    the peer runs at its best."""
    import onnx
    model = onnx.load(path)
    inits = {i.name for i in model.graph.initializer}
    keep = [i for i in model.graph.input if i.name not in inits]
    del model.graph.input[:]
    model.graph.input.extend(keep)
    onnx.save(model, path)


def main(cache, names):
    os.makedirs(cache, exist_ok=True)
    for name in names or MODELS:
        export(cache, name, MODELS[name])
        print(f"# exported {name}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
