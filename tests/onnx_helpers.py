"""Helpers of tests/test_onnx.py: mxfn's own forward (the reference), onnxruntime runs of an
exported file, random parameters for a symbol, and the MXNet 1.9.1 script that writes the
model-zoo CNNs as -symbol.json / .params files."""

import numpy as np
import onnx
import onnxruntime as ort

import mxfn as mx

RTOL, ATOL = 1e-4, 1e-5


def mxfn_forward(sym, params, data):
    """mxfn's inference outputs (numpy) of ``sym`` with ``params`` on the ``data`` dict, through
    an executor bound to the arrays (labels of loss layers get zeros: inference ignores them)."""
    params = {k.split(":", 1)[-1]: np.asarray(v) for k, v in params.items()}
    known = {**params, **data}
    arg_shapes, _, _ = mx.sym.infer_shape(sym, {k: np.shape(v) for k, v in data.items()})
    args = {n: mx.nd.array(known[n]) if n in known else mx.nd.zeros(s)
            for n, s in zip(sym.list_arguments(), arg_shapes)}
    aux = {n: mx.nd.array(params[n]) for n in sym.list_auxiliary_states()}
    exe = mx.executor.bind(sym, mx.cpu(), args, grad_req="null", aux_states=aux)
    return [o.asnumpy() for o in mx.executor.outputs(mx.executor.forward(exe, is_train=False))]


def ort_run(path, data):
    """onnxruntime's outputs of the model at ``path`` on the ``data`` dict (after
    ``onnx.checker.check_model`` on the file)."""
    onnx.checker.check_model(str(path), full_check=True)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    types = {i.name: _ORT_TYPES[i.type] for i in sess.get_inputs()}
    assert sorted(types) == sorted(data)
    return sess.run(None, {k: np.asarray(v).astype(types[k]) for k, v in data.items()})


_ORT_TYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
              "tensor(int32)": np.int32, "tensor(int64)": np.int64, "tensor(int8)": np.int8,
              "tensor(uint8)": np.uint8}


def assert_same(got, ref, rtol=RTOL, atol=ATOL):
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g.shape == r.shape, (g.shape, r.shape)
        np.testing.assert_allclose(g, r, rtol=rtol, atol=atol)


def random_params(sym, data, seed=0):
    """Random values for every argument and auxiliary state of ``sym`` that is not in ``data``
    and not a label (moving variances positive, so BatchNorm stays finite)."""
    rng = np.random.default_rng(seed)
    arg_shapes, _, aux_shapes = mx.sym.infer_shape(sym, {k: np.shape(v) for k, v in data.items()})
    labels = {a for a in sym.list_arguments() if a.endswith("_label")}
    params = {}
    names = list(zip(sym.list_arguments(), arg_shapes)) + list(zip(sym.list_auxiliary_states(), aux_shapes))
    for name, shape in names:
        if name in data or name in labels:
            continue
        if name.endswith("_var"):
            params[name] = rng.uniform(0.5, 1.5, shape).astype(np.float32)
        else:
            params[name] = (rng.normal(size=shape) * 0.5).astype(np.float32)
    return params


def export_and_compare(tmp_path, sym, params, data, runs=None, name="model", rtol=RTOL, atol=ATOL, **opts):
    """Exports ``sym`` with the shapes of ``data``, checks the file and compares onnxruntime with
    mxfn on ``data`` and on every dict of ``runs`` (other batch sizes, for dynamic exports).
    Returns the exported path."""
    path = mx.onnx.export_model(sym, params, {"in_shapes": [np.shape(v) for v in data.values()],
                                              "onnx_file_path": str(tmp_path / f"{name}.onnx"), **opts})
    for d in [data] + list(runs or []):
        assert_same(ort_run(path, d), mxfn_forward(sym, params, d), rtol, atol)
    return path


# Run under MXNet 1.9.1: writes <name>-symbol.json and <name>-0000.params for each model of
# the Gluon model zoo, with random BatchNorm statistics and scales (an initialised net has
# mean 0, variance 1, which would hide a statistic the exporter gets wrong).
ZOO_SCRIPT = r"""
import os, sys
import numpy as np
import mxnet as mx
from mxnet.gluon.model_zoo import vision
out = sys.argv[1]
for spec in sys.argv[2:]:
    name, size = spec.split(":")
    mx.random.seed(0)
    rng = np.random.RandomState(0)
    net = vision.get_model(name)
    net.initialize(mx.init.Xavier(magnitude=2), ctx=mx.cpu())
    net(mx.nd.zeros((1, 3, int(size), int(size))))
    for pname, p in net.collect_params().items():
        shape = p.shape
        if pname.endswith("running_var"):
            p.set_data(mx.nd.array(rng.uniform(0.5, 1.5, shape)))
        elif pname.endswith(("running_mean", "beta")):
            p.set_data(mx.nd.array(rng.normal(0, 0.1, shape)))
        elif pname.endswith("gamma"):
            p.set_data(mx.nd.array(rng.uniform(0.8, 1.2, shape)))
    net.hybridize()
    net(mx.nd.zeros((1, 3, int(size), int(size))))
    net.export(os.path.join(out, name))
print("ok")
"""
