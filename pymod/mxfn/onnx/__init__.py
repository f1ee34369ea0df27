"""mx.onnx: export a symbol and its parameters to an ONNX model (MXNet 1.9.1's
``mx.onnx.export_model``), for ONNX Runtime, TensorRT and the other runtimes that read ONNX.

Needs the ``onnx`` package (``pip install 'mxfn[onnx]'``); importing mxfn does not.
The graph is read from the symbol's MXNet JSON, one converter per MXNet operator
(``get_operator_support()`` lists them); shapes come from mxfn's own shape inference.
"""

from __future__ import annotations

import json
import numbers
import os
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .. import _native, ndarray, symbol
from .._dtypes import dtype_name
from .._errors import MXFNError
from .._opts import REQUIRED, documented, opt, parse_opts
from . import _nn, _proto, _rnn, _tensor  # noqa: F401  (_nn, _rnn, _tensor register the converters)
from ._graph import CONVERTERS, Graph, Node, read_nodes

__all__ = ["export_model", "get_operator_support"]

try:  # the producer_version written into the model (as mxfn.__version__, which imports us)
    _VERSION = metadata.version("mxfn")
except metadata.PackageNotFoundError:
    _VERSION = _native.__version__

_F = "onnx.export_model"

# Loss layers whose label input the exported (inference) graph drops, as MXNet's exporter does.
_LOSS_OPS = ("SoftmaxOutput", "LinearRegressionOutput", "LogisticRegressionOutput", "MAERegressionOutput")

_EXPORT_OPTS = {
    "in_shapes": opt(REQUIRED, (list, tuple), "one shape per data input (the symbol's inputs that "
                     "are not in params, in list_inputs order, labels of loss layers left out)",
                     aliases=("input_shape",)),
    "in_types": opt("float32", (str, type, np.dtype, list, tuple), "a dtype for every data input, "
                    "or a list of them", aliases=("input_type",)),
    "onnx_file_path": opt("model.onnx", (str, os.PathLike), "where to write the model"),
    "dynamic": opt(False, bool, "declare dynamic input axes (every axis, unless "
                   "dynamic_input_shapes says which)"),
    "dynamic_input_shapes": opt(None, (list, tuple), "with dynamic: one shape per data input, "
                                "None for each dynamic axis, the in_shapes size elsewhere"),
    "verbose": opt(False, bool, 'log every converted node (logger "mxfn", level INFO)'),
    "run_shape_inference": opt(False, bool, "run ONNX shape inference over the model before "
                               "writing it (a failure keeps the model as converted)"),
    "opset_version": opt(13, int, "the ONNX opset (13 up to what the installed onnx knows)"),
}


def get_operator_support(opset_version: Optional[int] = None) -> List[str]:
    """The MXNet operator names ``export_model`` converts (MXNet's
    ``mx.onnx.get_operator_support``); every converter works from opset 13 on, so
    ``opset_version`` does not change the list.

    Example:
        >>> {"FullyConnected", "Convolution", "SoftmaxOutput"} <= set(get_operator_support())
        True
    """
    return sorted(CONVERTERS)


@documented(_EXPORT_OPTS)
def export_model(sym: Any, params: Any, opts: Optional[Mapping] = None, /, **kw: Any) -> str:
    """Exports ``sym`` with ``params`` as an ONNX model file (MXNet 1.9.1's
    ``mx.onnx.export_model``, plus the ``opset_version`` option).

    ``sym`` is a Symbol or the path of a ``-symbol.json`` file; ``params`` a dict name →
    NDArray or numpy array (MXNet's ``arg:``/``aux:`` prefixes accepted), a list
    ``[arg_params, aux_params]``, or the path of a ``.params`` file. The model's inputs are the
    symbol's inputs that are not in ``params``, named as in the symbol; a loss layer's label
    input is dropped and the layer exported for inference (SoftmaxOutput as Softmax, the
    regression outputs as identity or Sigmoid, Dropout as identity). Outputs are named like
    MXNet's exporter names them: the node name (``softmax`` for ``softmax_output``), with
    the output index appended for a node with several outputs (``split0`` + ``1``).

    With ``dynamic=True`` the axes given as None (every axis, without
    ``dynamic_input_shapes``) are declared dynamic. Sizes that shape inference shows to
    follow a dynamic axis are read from the inputs at run time (a Reshape keeps the batch axis
    as 0), so the model runs at other batch sizes; sizes that do not change stay constants.

    An operator without a converter, or an attribute value a converter does not support,
    raises MXFNError naming the node and the operator.

    %OPTIONS%

    Returns:
        The path written (``onnx_file_path``), written atomically.

    Example:
        >>> import os, tempfile, mxfn as mx
        >>> fc = mx.sym.fully_connected(mx.sym.variable("data"), num_hidden=2, name="fc")
        >>> params = {"fc_weight": mx.nd.ones((2, 3)), "fc_bias": mx.nd.zeros(2)}
        >>> path = os.path.join(tempfile.mkdtemp(), "fc.onnx")
        >>> export_model(fc, params, in_shapes=[(1, 3)], onnx_file_path=path) == path
        True
    """
    _proto.require()
    o = parse_opts(_F, _EXPORT_OPTS, opts, kw)
    sym = _load_symbol(sym)
    params = _load_params(params)
    opset = _check_opset(o["opset_version"])
    nodes, heads = read_nodes(sym)

    data_names = _data_inputs(nodes, params)
    in_shapes = _shapes("in_shapes", o["in_shapes"], data_names)
    in_types = _types(o["in_types"], data_names)
    declared = _declared_dims(o, in_shapes, data_names)

    g = Graph(nodes, params, opset, o["verbose"])
    _infer(g, sym, data_names, in_shapes, in_types, declared)
    g.inputs = [(n, t, d) for n, t, d in zip(data_names, in_types, declared)]

    for node in nodes:
        if node.op == "null":
            if node.name in params or node.name in data_names:
                g.entry[(node.index, 0)] = node.name
            continue
        conv = CONVERTERS.get(node.op)
        if conv is None:
            raise MXFNError(f'{_F}: node "{node.name}": operator {node.raw_op} has no ONNX converter '
                            f"(mx.onnx.get_operator_support() lists the converted operators)")
        g.log(node)
        outs = conv(g, node)
        for k, t in enumerate([outs] if isinstance(outs, str) else outs):
            g.entry[(node.index, k)] = t

    outputs = _graph_outputs(g, sym, heads)
    for name in g.used:
        g.initializers[name] = params[name]
    model = _proto.build_model(g, g.inputs, outputs, _VERSION)
    if o["run_shape_inference"]:
        model = _proto.shape_inference(model)
    return _proto.write(model, o["onnx_file_path"])


def _load_symbol(sym: Any) -> symbol.Symbol:
    if isinstance(sym, symbol.Symbol):
        return sym
    if isinstance(sym, (str, os.PathLike)):
        return symbol.load(sym)
    raise TypeError(f"{_F}: sym must be a Symbol or the path of a -symbol.json file, "
                    f"got {type(sym).__name__}")


def _load_params(params: Any) -> Dict[str, np.ndarray]:
    """``params`` as a dict name → numpy array, ``arg:``/``aux:`` prefixes removed."""
    if isinstance(params, (str, os.PathLike)):
        loaded = ndarray.load(params)
        if not isinstance(loaded, Mapping):
            raise MXFNError(f"{_F}: {os.fspath(params)!r} holds unnamed arrays; "
                            f"a .params file maps names to arrays")
        params = loaded
    elif isinstance(params, (list, tuple)) and len(params) == 2 and all(isinstance(p, Mapping) for p in params):
        params = {**params[0], **params[1]}  # MXNet's [arg_params, aux_params]
    elif not isinstance(params, Mapping):
        raise TypeError(f"{_F}: params must be a dict name -> array, [arg_params, aux_params] or the "
                        f"path of a .params file, got {type(params).__name__}")
    out = {}
    for k, v in params.items():
        if not isinstance(k, str):
            raise TypeError(f"{_F}: params keys must be str, got {type(k).__name__} {k!r}")
        name = k[4:] if k.startswith(("arg:", "aux:")) else k
        out[name] = np.asarray(v)
    return out


def _check_opset(v: int) -> int:
    newest = _proto.max_opset()
    if not 13 <= v <= newest:
        raise MXFNError(f'{_F}: option "opset_version" must be between 13 and {newest} (the newest '
                        f"opset of the installed onnx package), got {v}")
    return int(v)


def _data_inputs(nodes: List[Node], params: Dict[str, np.ndarray]) -> List[str]:
    """The data inputs: variables not in params, except labels used only by loss layers."""
    used_as: Dict[int, set] = {}
    for n in nodes:
        for pos, (src, _) in enumerate(n.inputs):
            if nodes[src].op == "null":
                used_as.setdefault(src, set()).add(pos == 1 and n.op in _LOSS_OPS)
    names = [n.name for n in nodes
             if n.op == "null" and n.name not in params and used_as.get(n.index) != {True}]
    return list(dict.fromkeys(names))


def _shapes(key: str, value: Sequence, data_names: List[str],
            allow_none: bool = False) -> List[tuple]:
    if len(value) != len(data_names):
        raise MXFNError(f'{_F}: option "{key}" has {len(value)} shape(s) but the symbol has '
                        f"{len(data_names)} data input(s) {data_names} (the inputs not in params)")
    out = []
    for name, s in zip(data_names, value):
        ok = isinstance(s, (list, tuple)) and all(
            (d is None and allow_none) or (isinstance(d, numbers.Integral) and not isinstance(d, bool) and int(d) > 0)
            for d in s)
        if not ok:
            what = "positive ints or None" if allow_none else "positive ints"
            raise MXFNError(f'{_F}: option "{key}": the shape of input "{name}" must be a tuple of '
                            f"{what}, got {s!r}")
        out.append(tuple(None if d is None else int(d) for d in s))
    return out


def _types(value: Any, data_names: List[str]) -> List[np.dtype]:
    values = list(value) if isinstance(value, (list, tuple)) else [value] * len(data_names)
    if len(values) != len(data_names):
        raise MXFNError(f'{_F}: option "in_types" has {len(values)} dtype(s) but the symbol has '
                        f"{len(data_names)} data input(s) {data_names}")
    out = []
    for v in values:
        try:
            out.append(np.dtype(dtype_name(v, _F)))
        except MXFNError as e:
            raise MXFNError(f'{_F}: option "in_types": {e}'.replace(f"{_F}: {_F}: ", f"{_F}: ")) from None
    return out


def _declared_dims(o: Mapping, in_shapes: List[Tuple[int, ...]],
                   data_names: List[str]) -> List[List[Optional[int]]]:
    """The ONNX input dims: in_shapes, with None on the dynamic axes."""
    dyn = o["dynamic_input_shapes"]
    if not o["dynamic"]:
        if dyn is not None:
            raise MXFNError(f'{_F}: option "dynamic_input_shapes" is given but "dynamic" is False; '
                            f"set dynamic=True to declare dynamic axes")
        return [list(s) for s in in_shapes]
    if dyn is None:
        return [[None] * len(s) for s in in_shapes]  # MXNet: every axis dynamic
    dyn = _shapes("dynamic_input_shapes", dyn, data_names, allow_none=True)
    for name, s, d in zip(data_names, in_shapes, dyn):
        if len(s) != len(d) or any(b is not None and a != b for a, b in zip(s, d)):
            raise MXFNError(f'{_F}: option "dynamic_input_shapes": the shape of input "{name}" must '
                            f"match its in_shapes {s} on every axis that is not None, got {d}")
    return [list(d) for d in dyn]


def _infer(g: Graph, sym: symbol.Symbol, data_names: List[str], in_shapes: List[Tuple[int, ...]],
           in_types: List[np.dtype], declared: List[List[Optional[int]]]) -> None:
    """Fills ``g.shapes``, ``g.dtypes`` and ``g.n_outputs`` from mxfn's shape and type
    inference over every node output, under the exported shapes and under each variation of
    the dynamic axes that inference accepts (see ``Graph``)."""
    internals = sym.get_internals()
    heads = [(int(h[0]), int(h[1])) for h in json.loads(internals.tojson())["heads"]]
    for nid, _ in heads:
        g.n_outputs[nid] = g.n_outputs.get(nid, 0) + 1
    fixed = {k: v.shape for k, v in g.params.items()}

    def run(shapes: Sequence[Sequence[int]]) -> List[Tuple[int, ...]]:
        _, outs, _ = symbol.infer_shape(internals, {**fixed, **dict(zip(data_names, shapes))})
        return outs

    try:
        base = run(in_shapes)
    except MXFNError as e:
        raise MXFNError(f"{_F}: shape inference failed for in_shapes {in_shapes}: {e}") from None
    variants, tried = [], set()
    dynamic_axes = [(i, a) for i, d in enumerate(declared) for a, v in enumerate(d) if v is None]
    for i, a in dynamic_axes:
        size = in_shapes[i][a]
        # One axis alone, else every dynamic axis of the same size with it (inputs sharing a
        # batch axis can only vary together); a size with no common factor first, then double
        # (a Reshape or split may need the size's factors).
        groups = ([(i, a)], [(j, b) for j, b in dynamic_axes if in_shapes[j][b] == size])
        for group, alt in [(gr, alt) for alt in (2 * size + 3, 2 * size) for gr in groups]:
            attempt = (frozenset(group), alt)
            if attempt in tried:
                continue
            tried.add(attempt)
            shapes = [list(s) for s in in_shapes]
            for j, b in group:
                shapes[j][b] = alt
            try:
                variants.append(run(shapes))
                break
            except MXFNError:
                continue
    for n, key in enumerate(heads):
        g.shapes[key] = [tuple(v[n][k] for v in [base] + variants) for k in range(len(base[n]))]

    types = {k: dtype_name(v.dtype, _F) for k, v in g.params.items()}
    types.update((n, t.name) for n, t in zip(data_names, in_types))
    _, out_types, _ = symbol.infer_type(internals, types)
    g.dtypes.update(zip(heads, out_types))


def _graph_outputs(g: Graph, sym: symbol.Symbol,
                   heads: List[Tuple[int, int]]) -> List[Tuple[str, np.dtype, List[Optional[int]]]]:
    """``(name, dtype, dims)`` per head, named as MXNet's exporter does (``fc1_output`` →
    ``fc1``, ``split0_output1`` → ``split01``); an Identity node gives the name when the
    converter's tensor has another one."""
    outputs: List[Tuple[str, np.dtype, List[Optional[int]]]] = []
    for (nid, k), mx_name in zip(heads, sym.list_outputs()):
        node = g.nodes[nid]
        if (nid, k) not in g.entry:
            raise node.fail(f"output {k} is not produced by the exporter")
        name = g.out(node, k) if node.op != "null" else node.name
        tensor = g.entry[(nid, k)]
        if tensor != name:
            if name in {o[0] for o in outputs} or name in g.entry.values():
                name = g.fresh(name)
            g.op("Identity", [g.use(tensor)], name)
        else:
            g.use(tensor)
        if name in {o[0] for o in outputs}:
            raise node.fail(f'output "{mx_name}" appears twice among the symbol\'s outputs')
        dims = [d[0] if len(set(d)) == 1 else None for d in g.shapes[(nid, k)]]
        outputs.append((name, g.dtypes[(nid, k)], dims))
    return outputs
