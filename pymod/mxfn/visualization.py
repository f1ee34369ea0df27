"""mx.visualization: a layer table (``print_summary``) and a Graphviz DOT graph
(``plot_network``) of a symbol, as MXNet draws them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ._errors import MXFNError
from ._fit import plot_history  # noqa: F401  (mx.visualization.plot_history)
from ._opts import opt, parse_opts

if TYPE_CHECKING:
    from ._types import Shape
    from .symbol import Symbol


def _internal_shapes(sym: Symbol, shape: Mapping[str, Shape] | None) -> dict[str, tuple[int, ...]]:
    if not shape:
        return {}
    internals = sym.get_internals()
    _, out_shapes, _ = internals.infer_shape(dict(shape))
    return dict(zip(internals.list_outputs(), out_shapes))


def _node_output(op: str, name: str) -> str:
    return name if op == "null" else f"{name}_output"


# Loss layers: their second input is the label.
_LOSS_LAYERS = frozenset({"SoftmaxOutput", "LinearRegressionOutput", "LogisticRegressionOutput",
                          "MAERegressionOutput", "SVMOutput"})


def print_summary(sym: Symbol, shape: Mapping[str, Shape] | None = None, line_length: int = 120,
                  positions: Sequence[float] = (.44, .64, .74, 1.)) -> str:
    """Prints MXNet's layer table — layer (type), output shape (without the batch axis),
    parameter count, previous layers — and the total parameter count.

    ``shape`` maps input names to shapes; without it the shape column stays empty.

    Returns:
        The printed text.

    Example:
        >>> import mxfn as mx
        >>> fc = mx.sym.fully_connected(mx.sym.variable("data"), num_hidden=4, name="fc")
        >>> text = print_summary(fc, {"data": (1, 3)})  # doctest: +ELLIPSIS
        ___...
        >>> "Total params: 16" in text
        True
    """
    nodes = sym._h.nodes()
    shapes = _internal_shapes(sym, shape)
    given = set(shape or {})
    cols = [int(line_length * p) for p in positions]
    lines = []

    def row(fields: Sequence[Any]) -> None:
        text = ""
        for f, end in zip(fields, cols):
            text = (text + str(f))[:end].ljust(end)
        lines.append(text)

    lines.append("_" * line_length)
    row(["Layer (type)", "Output Shape", "Param #", "Previous Layer"])
    lines.append("=" * line_length)
    total = 0
    heads = set(sym.list_outputs())
    for i, (op, name, attrs, inputs) in enumerate(nodes):
        if op == "null" and i > 0 and name not in given and _node_output(op, name) not in heads:
            continue  # parameters are counted with their layer, not listed
        params = 0
        prev = []
        for k, (j, _) in enumerate(inputs):
            pop, pname, _, _ = nodes[j]
            if pop == "null" and k == 1 and op in _LOSS_LAYERS:
                continue  # the label of a loss layer is an input, not a parameter (as MXNet counts)
            if pop == "null" and pname not in given:
                s = shapes.get(pname)
                params += int(np.prod(s)) if s else 0
            elif pop != "null" or pname in given:
                prev.append(pname)
        total += params
        out = shapes.get(_node_output(op, name), ())
        out_text = "x".join(str(d) for d in out[1:]) if len(out) > 1 else ("x".join(map(str, out)))
        first = prev[0] if prev else ""
        row([f"{name}({op})", out_text, params, first])
        for p in prev[1:]:
            row(["", "", "", p])
        lines.append("_" * line_length)
    lines[-1] = "=" * line_length
    lines.append(f"Total params: {total}")
    lines.append("_" * line_length)
    text = "\n".join(lines)
    print(text)
    return text


# MXNet's plot_network hides variables with these suffixes (the parameters).
_PARAM_SUFFIXES = ("_weight", "_bias", "_beta", "_gamma", "_moving_var", "_moving_mean",
                   "_running_var", "_running_mean")


def plot_network(sym: Symbol, opts: Mapping[str, Any] | None = None, /, **kw: Any) -> str:
    """The network as Graphviz DOT text (one node per layer, parameters hidden, edges labelled
    with shapes when ``shape`` is given); also rendered to ``filename`` when the ``graphviz``
    package is installed and ``filename`` is given.

    Options:
        title (str, "plot"): graph name.
        shape (map, None): input shapes, for edge labels.
        hide_weights (bool, True): leave parameter variables out.
        filename (str, None): render to this file (format from ``format``) when graphviz exists.
        format (str, "pdf"): render format.

    Example:
        >>> import mxfn as mx
        >>> dot = plot_network(mx.sym.relu(mx.sym.variable("x"), name="r"))
        >>> dot.splitlines()[0], '"r" -> "x"' in dot
        ('digraph plot {', True)
    """
    o = parse_opts("visualization.plot_network", {
        "title": opt("plot", str, "graph name"),
        "shape": opt(None, None, "input shapes"),
        "hide_weights": opt(True, bool, "hide parameter variables"),
        "filename": opt(None, str, "render target"),
        "format": opt("pdf", str, "render format"),
    }, opts, kw)
    nodes = sym._h.nodes()
    shapes = _internal_shapes(sym, o["shape"])
    hidden = set()
    lines = [f"digraph {o['title']} {{", "  node [shape=box, style=filled, fixedsize=false];"]
    for i, (op, name, attrs, inputs) in enumerate(nodes):
        if op == "null" and o["hide_weights"] and name.endswith(_PARAM_SUFFIXES):
            hidden.add(i)
            continue
        label = name if op == "null" else f"{op}\\n{name}"
        color = "#8dd3c7" if op == "null" else "#fb8072"
        lines.append(f'  "{name}" [label="{label}", fillcolor="{color}"];')
    for i, (op, name, attrs, inputs) in enumerate(nodes):
        for j, k in inputs:
            if j in hidden or i in hidden:
                continue
            src = nodes[j][1]
            s = shapes.get(_node_output(nodes[j][0], src))
            lab = f' [label="{"x".join(map(str, s[1:]))}"]' if s else ""
            lines.append(f'  "{name}" -> "{src}"{lab};')
    lines.append("}")
    dot = "\n".join(lines)
    if o["filename"]:
        try:
            import graphviz
        except ImportError:
            raise MXFNError("visualization.plot_network: rendering a file needs the graphviz package") from None
        graphviz.Source(dot).render(o["filename"], format=o["format"], cleanup=True)
    return dot

