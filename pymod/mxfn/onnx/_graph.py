"""The export's working state: the MXNet graph read from its JSON (nodes with parsed attributes),
the shapes and dtypes of every node output, and the ONNX graph under construction as plain
Python data (nodes, initializers) that ``_proto`` turns into protobuf. Converters (``_nn``,
``_tensor``) register here, one function per MXNet operator."""

from __future__ import annotations

import ast
import json
import logging
from collections.abc import Iterable, Sequence
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from .._errors import MXFNError
from .._ops import OPS

_LOG = logging.getLogger("mxfn")

# The sizes of one tensor: per axis, the size under every variant (see Graph).
Dims = List[Tuple[int, ...]]
# A converter returns the ONNX tensor name of each visible output of its node.
Outputs = Union[str, List[str]]
Converter = Callable[["Graph", "Node"], Outputs]

# op name (MXNet's, as in the registry) -> its converter.
CONVERTERS: Dict[str, Converter] = {}

# Every registry name and alias -> the registry name, so a JSON written with an alias
# ("_Plus", "Softmax", "ElementWiseSum") finds its converter.
CANONICAL: Dict[str, str] = {}
for _info in OPS:
    CANONICAL[_info["name"]] = _info["name"]
    for _alias in _info["aliases"]:
        CANONICAL.setdefault(_alias, _info["name"])

INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min


def converts(*names: str) -> Callable[[Converter], Converter]:
    """Decorator: registers ``f(g, node)`` as the converter of the MXNet operators ``names``."""
    def deco(f: Converter) -> Converter:
        for n in names:
            CONVERTERS[n] = f
        return f
    return deco


def parse_value(text: Any) -> Any:
    """An MXNet attribute string as a Python value: ``"(3, 3)"`` → ``(3, 3)``, ``"True"`` →
    True, ``"None"`` → None, ``"1e-05"`` → 1e-05; anything else (``"relu"``) stays a string.

    Example:
        >>> parse_value("(3, 3)"), parse_value("True"), parse_value("0.5"), parse_value("avg")
        ((3, 3), True, 0.5, 'avg')
    """
    if not isinstance(text, str):
        return text
    t = text.strip()
    if t in ("True", "true"):
        return True
    if t in ("False", "false"):
        return False
    if t in ("None", ""):
        return None if t == "None" else ""
    try:
        return ast.literal_eval(t)
    except (ValueError, SyntaxError):
        return t


# The registry's parameter defaults, parsed once: op -> {param: value}.
DEFAULTS = {info["name"]: {p[0]: parse_value(p[2]) for p in info["params"] if p[2] is not None}
            for info in OPS}


class Node:
    """One MXNet graph node: ``op`` (the registry name), ``name``, ``attrs`` (parsed, with the
    registry's defaults filled in), ``inputs`` (``(node index, output index)`` pairs)."""

    __slots__ = ("index", "op", "raw_op", "name", "attrs", "inputs")

    def __init__(self, index: int, entry: dict) -> None:
        self.index = index
        self.raw_op = entry["op"]
        self.op = CANONICAL.get(self.raw_op, self.raw_op)
        self.name = entry["name"]
        raw = entry.get("attrs") or entry.get("param") or entry.get("attr") or {}
        attrs = dict(DEFAULTS.get(self.op, {}))
        attrs.update((k, parse_value(v)) for k, v in raw.items() if not k.startswith("__"))
        self.attrs = attrs
        self.inputs = [(int(i[0]), int(i[1])) for i in entry.get("inputs", [])]

    def get(self, key: str, default: Any = None) -> Any:
        """Attribute ``key`` (None-valued attributes give ``default``)."""
        v = self.attrs.get(key)
        return default if v is None else v

    def flag(self, key: str, default: bool = False) -> bool:
        """A boolean attribute (``True``, ``"true"``, ``1``)."""
        v = self.get(key, default)
        if isinstance(v, str):
            return v.lower() in ("true", "1")
        return bool(v)

    def ints(self, key: str, default: tuple = ()) -> Tuple[int, ...]:
        """A tuple-of-ints attribute (a single int becomes a 1-tuple)."""
        v = self.get(key, default)
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            return (int(v),)
        return tuple(int(x) for x in v)

    def num(self, key: str, default: Optional[float] = None) -> float:
        """A float attribute."""
        return float(self.get(key, default))

    def fail(self, why: str) -> MXFNError:
        """The error for an unsupported use of this node, naming node and operator."""
        return MXFNError(f'onnx.export_model: node "{self.name}" (operator {self.raw_op}): {why}')


class Graph:
    """The export state: MXNet nodes, shapes and dtypes per node output, and the ONNX nodes,
    initializers, inputs and outputs built so far.

    Shapes are kept per *variant*: ``dims(key)`` is a list with one tuple per axis holding that
    axis's size under the exported shapes and then under every variation of a dynamic input
    axis that shape inference accepts. A size equal across variants is static; converters that
    need a concrete shape (Reshape) write static sizes as constants and take varying ones from
    the input at run time (see ``shape_input``).
    """

    def __init__(self, nodes: List[Node], params: Dict[str, np.ndarray], opset: int, verbose: bool = False) -> None:
        self.nodes = nodes
        self.params = params
        self.opset = opset
        self.verbose = verbose
        # (op_type, inputs, outputs, attrs)
        self.onnx_nodes: List[Tuple[str, List[str], List[str], Dict[str, Any]]] = []
        self.initializers: Dict[str, np.ndarray] = {}
        # (name, dtype, dims with None for dynamic axes)
        self.inputs: List[Tuple[str, np.dtype, List[Optional[int]]]] = []
        self.entry: Dict[Tuple[int, int], str] = {}      # (node, output) -> ONNX tensor name
        self.shapes: Dict[Tuple[int, int], Dims] = {}    # (node, output) -> Dims
        self.dtypes: Dict[Tuple[int, int], np.dtype] = {}
        self.n_outputs: Dict[int, int] = {}              # node index -> visible outputs
        self.used: Dict[str, None] = {}  # the parameters used, in first-use order
        self._names = {n.name for n in nodes}
        self._counter = 0
        self._shape_of: Dict[str, str] = {}

    # -- names
    def fresh(self, hint: str) -> str:
        """A tensor name not used yet, from ``hint``."""
        while True:
            self._counter += 1
            name = f"{hint}__{self._counter}"
            if name not in self._names:
                self._names.add(name)
                return name

    def out(self, node: Node, k: int = 0) -> str:
        """The ONNX name of visible output ``k`` of ``node``: the node name for a single
        output, ``name + str(k)`` for several (MXNet's exporter names them so)."""
        return node.name if self.n_outputs.get(node.index, 1) == 1 else f"{node.name}{k}"

    # -- the MXNet side
    def x(self, node: Node, i: int = 0) -> str:
        """The ONNX tensor name of input ``i`` of ``node``."""
        key = node.inputs[i]
        if key not in self.entry:
            src = self.nodes[key[0]]
            raise node.fail(f'uses output {key[1]} of node "{src.name}" ({src.raw_op}), '
                            f"which the exporter does not produce")
        return self.use(self.entry[key])

    def use(self, tensor: str) -> str:
        """Marks ``tensor`` as used (a parameter becomes an initializer); returns it."""
        if tensor in self.params:
            self.used.setdefault(tensor)
        return tensor

    def dims(self, node: Node, i: int = 0) -> Dims:
        """Per-axis variant tuples of input ``i`` of ``node``."""
        return self.shapes[node.inputs[i]]

    def shape(self, node: Node, i: int = 0) -> Tuple[int, ...]:
        """The exported (static) shape of input ``i`` of ``node``."""
        return tuple(d[0] for d in self.dims(node, i))

    def ndim(self, node: Node, i: int = 0) -> int:
        return len(self.dims(node, i))

    def dtype(self, node: Node, i: int = 0) -> np.dtype:
        """The dtype of input ``i`` of ``node``."""
        return self.dtypes[node.inputs[i]]

    def out_dims(self, node: Node, k: int = 0) -> Dims:
        return self.shapes[(node.index, k)]

    def out_shape(self, node: Node, k: int = 0) -> Tuple[int, ...]:
        return tuple(d[0] for d in self.out_dims(node, k))

    def out_dtype(self, node: Node, k: int = 0) -> np.dtype:
        return self.dtypes[(node.index, k)]

    def const_input(self, node: Node, i: int) -> Optional[np.ndarray]:
        """Input ``i`` of ``node`` as a numpy array when it is a parameter, else None."""
        src = self.nodes[node.inputs[i][0]]
        return self.params.get(src.name) if src.op == "null" else None

    def has_input(self, node: Node, i: int) -> bool:
        return len(node.inputs) > i

    # -- the ONNX side
    def op(self, op_type: str, inputs: Sequence[str], out: Optional[str] = None, **attrs: Any) -> str:
        """Adds a one-output ONNX node (attributes given as None are left out); returns the
        output's name, ``out`` or a fresh one."""
        return self.op_n(op_type, inputs, 1, None if out is None else [out], **attrs)[0]

    def op_n(self, op_type: str, inputs: Sequence[str], n_out: int, outs: Optional[List[str]] = None,
             **attrs: Any) -> List[str]:
        """Adds an ONNX node with ``n_out`` outputs named ``outs`` (fresh names by default)."""
        if outs is None:
            outs = [self.fresh(op_type) for _ in range(n_out)]
        self._names.update(outs)
        self.onnx_nodes.append((op_type, list(inputs), list(outs),
                                {k: v for k, v in attrs.items() if v is not None}))
        return list(outs)

    def const(self, value: Any, dtype: Any = None, hint: str = "const") -> str:
        """An initializer holding ``value`` (in ``dtype`` when given); returns its name."""
        arr = np.asarray(value, dtype=dtype)
        name = self.fresh(hint)
        self.initializers[name] = arr
        return name

    def ints(self, values: Iterable[int], hint: str = "ints") -> str:
        """A 1-D int64 initializer."""
        return self.const(np.asarray(list(values), dtype=np.int64).reshape(-1), hint=hint)

    def cast(self, x: str, dtype: Any, out: Optional[str] = None) -> str:
        """``x`` cast to ``dtype`` (a numpy dtype; ``_proto`` writes the ONNX type)."""
        return self.op("Cast", [x], out, to=np.dtype(dtype))

    def scalar(self, value: float, dtype: Any, hint: str = "scalar") -> str:
        """A 0-d initializer of ``dtype`` (the type of the tensor it combines with)."""
        return self.const(np.asarray(value).astype(dtype), hint=hint)

    # -- composite helpers
    def reduce(self, kind: str, x: str, axes: Iterable[int], keepdims: bool, out: Optional[str] = None) -> str:
        """``Reduce<kind>`` over ``axes``: axes as an input where the opset says so (ReduceSum
        from 13, the others from 18), as an attribute before."""
        ax = [int(a) for a in axes]
        if kind == "Sum" or self.opset >= 18:
            return self.op(f"Reduce{kind}", [x, self.ints(ax, "axes")], out, keepdims=int(keepdims))
        return self.op(f"Reduce{kind}", [x], out, axes=ax, keepdims=int(keepdims))

    def squeeze(self, x: str, axes: Iterable[int], out: Optional[str] = None) -> str:
        return self.op("Squeeze", [x, self.ints(axes, "axes")], out)

    def unsqueeze(self, x: str, axes: Iterable[int], out: Optional[str] = None) -> str:
        return self.op("Unsqueeze", [x, self.ints(axes, "axes")], out)

    def shape_slice(self, x: str, start: int, end: Optional[int] = None) -> str:
        """``Shape(x)[start:end]`` as a 1-D int64 tensor (one Shape node per tensor)."""
        if x not in self._shape_of:
            self._shape_of[x] = self.op("Shape", [x])
        full = self._shape_of[x]
        ends = [INT64_MAX if end is None else end]
        return self.op("Slice", [full, self.ints([start], "start"), self.ints(ends, "end")])

    def dim_value(self, x: str, dims: Dims, axis: int) -> Union[int, str]:
        """The size of ``axis`` of tensor ``x``: an int when static, else a 1-element int64
        tensor read from ``x`` at run time."""
        d = dims[axis]
        if len(set(d)) == 1:
            return d[0]
        return self.shape_slice(x, axis, axis + 1)

    def shape_input(self, target: Dims, sources: Sequence[Tuple[str, Dims]],
                    reshape_src: Optional[Tuple[str, Dims]] = None) -> str:
        """A 1-D int64 tensor holding the shape ``target`` (per-axis variant tuples).

        Static sizes become constants. A varying size is taken from a source tensor
        (``sources``: ``(name, dims)`` pairs) with the same size under every variant; for a
        Reshape (``reshape_src`` = ``(name, dims)`` of its data), a size equal to the data's
        size at the same axis is written 0 (ONNX's "copy"), and one size found nowhere is -1.
        """
        pieces: List[str] = []
        const_run: List[int] = []
        unresolved: List[int] = []

        def flush() -> None:
            if const_run:
                pieces.append(self.ints(const_run, "shape"))
                const_run.clear()

        for k, d in enumerate(target):
            if len(set(d)) == 1:
                const_run.append(d[0])
                continue
            if reshape_src is not None and k < len(reshape_src[1]) and tuple(reshape_src[1][k]) == tuple(d):
                const_run.append(0)
                continue
            found: Optional[Tuple[str, int]] = None
            for name, sdims in ([reshape_src] if reshape_src else []) + list(sources):
                for j, sd in enumerate(sdims):
                    if tuple(sd) == tuple(d):
                        found = (name, j)
                        break
                if found:
                    break
            if found:
                flush()
                pieces.append(self.shape_slice(found[0], found[1], found[1] + 1))
            elif reshape_src is not None and not unresolved:
                unresolved.append(k)
                const_run.append(-1)
            else:
                raise MXFNError(f"onnx.export_model: cannot express a size of the dynamic shape "
                                f"{tuple(d[0] for d in target)} (axis {k}) from the inputs")
        flush()
        if len(pieces) == 1:
            return pieces[0]
        return self.op("Concat", pieces, axis=0)

    def reshape(self, x: str, x_dims: Dims, target: Dims, out: Optional[str] = None,
                sources: Sequence[Tuple[str, Dims]] = ()) -> str:
        """Reshape ``x`` (dims ``x_dims``) to ``target`` (per-axis variant tuples); varying
        sizes may also be read from ``sources`` (``(name, dims)`` pairs)."""
        return self.op("Reshape", [x, self.shape_input(target, sources, (x, x_dims))], out)

    def log(self, node: Node) -> None:
        if self.verbose:
            _LOG.info("onnx: converting node %s (%s)", node.name, node.raw_op)


def read_nodes(sym: Any) -> Tuple[List[Node], List[Tuple[int, int]]]:
    """The symbol's nodes (``Node``) and heads from its MXNet JSON. An operator node whose
    name was seen before gets MXNet's exporter's ``idx_<i>_`` prefix, so every ONNX tensor
    name is unique; variables of one name are one input (as mxfn binds them)."""
    graph = json.loads(sym.tojson())
    nodes, seen = [], set()
    for i, entry in enumerate(graph["nodes"]):
        n = Node(i, entry)
        if n.name in seen and n.op != "null":
            n.name = f"idx_{i}_{n.name}"
        seen.add(n.name)
        nodes.append(n)
    heads = [(int(h[0]), int(h[1])) for h in graph["heads"]]
    return nodes, heads
