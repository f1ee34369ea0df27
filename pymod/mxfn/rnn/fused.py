"""mx.rnn weights between layouts: ``unfuse`` (a fused cell as a stack of plain cells) and
``pack_weights`` / ``unpack_weights`` (per-gate arrays to and from stacked and fused ones),
in MXNet 1.9.1's layout, so fused ``{prefix}parameters`` vectors and per-cell weights convert
both ways.

The fused vector (MXNet's and cuDNN's): for each layer, each direction (l, r): the i2h weights
of each gate (``(h, input)`` for layer 0, ``(h, directions·h)`` above), then the h2h weights of
each gate ``(h, h)``; after all weights, the same walk over the biases, i2h then h2h, ``(h,)``.
Gates: lstm i, f, c, o; gru r, z, o; rnn one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import ndarray
from .._errors import MXFNError
from .cells import (GATES, BidirectionalCell, Cell, FusedRNNCell, GRUCell, LSTMCell, RNNCell,
                    ResidualCell, SequentialRNNCell, ZoneoutCell, _cell, bidirectional_cell, children,
                    dropout_cell, gru_cell, lstm_cell, rnn_cell, sequential_rnn_cell)


def unfuse(cell: FusedRNNCell) -> SequentialRNNCell:
    """The fused ``cell`` as a sequential cell of plain cells (MXNet's ``FusedRNNCell.unfuse``):
    layer ``i`` is a cell with prefix ``{prefix}l{i}_`` (bidirectional: a bidirectional cell of
    ``{prefix}l{i}_`` and ``{prefix}r{i}_``, output prefix ``{prefix}bi_l{i}_``), with a dropout
    cell between layers when ``dropout`` > 0. It steps, and runs without the RNN operator.
    ``unpack_weights(cell, …)`` then ``pack_weights(unfused, …)`` converts the weights.

    The lstm cells keep the fused cell's ``forget_bias`` (MXNet 1.9.1 drops it: its unfused
    cells always initialise with 1.0).

    Example:
        >>> from mxfn import rnn
        >>> u = rnn.unfuse(rnn.fused_rnn_cell(4, num_layers=2, dropout=0.5))
        >>> [type(c).__name__ + ":" + c.prefix for c in u.cells]
        ['LSTMCell:lstm_l0_', 'DropoutCell:lstm__dropout0_', 'LSTMCell:lstm_l1_']
    """
    fname = "rnn.unfuse"
    if not isinstance(cell, FusedRNNCell):
        raise TypeError(f'{fname}: "cell" expects a fused cell (rnn.fused_rnn_cell), got {type(cell).__name__}')

    def make(prefix: str) -> Cell:
        if cell.mode == "lstm":
            return lstm_cell(cell.num_hidden, prefix=prefix, forget_bias=cell.forget_bias)
        if cell.mode == "gru":
            return gru_cell(cell.num_hidden, prefix=prefix)
        return rnn_cell(cell.num_hidden, prefix=prefix, activation=cell.mode[len("rnn_"):])

    stack: list[Cell] = []
    p = cell.prefix
    for i in range(cell.num_layers):
        if cell.bidirectional:
            stack.append(bidirectional_cell(make(f"{p}l{i}_"), make(f"{p}r{i}_"), output_prefix=f"{p}bi_l{i}_"))
        else:
            stack.append(make(f"{p}l{i}_"))
        if cell.dropout > 0 and i != cell.num_layers - 1:
            stack.append(dropout_cell(cell.dropout, prefix=f"{p}_dropout{i}_"))
    return sequential_rnn_cell(stack)


def _np(fname: str, args: Mapping[str, Any], name: str) -> np.ndarray:
    if name not in args:
        raise MXFNError(f'{fname}: args has no "{name}"; expected it for this cell '
                        f"(got {sorted(args)[:8]}{'…' if len(args) > 8 else ''})")
    return np.asarray(args[name])


def _nd(a: np.ndarray) -> Any:
    return ndarray.array(np.ascontiguousarray(a), dtype=a.dtype.name)


def _args(fname: str, args: Any) -> dict[str, Any]:
    if not isinstance(args, Mapping):
        raise TypeError(f'{fname}: "args" expects a mapping name -> array, got {type(args).__name__}')
    return dict(args)


def unpack_weights(cell: Cell, args: Mapping[str, Any]) -> dict[str, Any]:
    """Stacked weights split per gate (MXNet's ``cell.unpack_weights``).

    A plain cell's ``{prefix}i2h_weight`` (gates stacked on rows) becomes
    ``{prefix}i2h{gate}_weight`` for each gate (lstm ``_i _f _c _o``, gru ``_r _z _o``, rnn
    ``""``), likewise h2h and the biases; a fused cell's ``{prefix}parameters`` becomes
    ``{prefix}{l|r}{layer}_{i2h|h2h}{gate}_{weight|bias}``. Other entries pass through.

    Returns:
        A new dict (``args`` is not changed); converted entries are new NDArrays.

    Example:
        >>> import numpy as np
        >>> from mxfn import rnn
        >>> c = rnn.rnn_cell(2)
        >>> sorted(rnn.unpack_weights(c, {n: np.zeros((2, 2)) for n in
        ...        ["rnn_i2h_weight", "rnn_i2h_bias", "rnn_h2h_weight", "rnn_h2h_bias"]}))
        ['rnn_h2h_bias', 'rnn_h2h_weight', 'rnn_i2h_bias', 'rnn_i2h_weight']
    """
    fname = "rnn.unpack_weights"
    _cell(fname, "cell", cell)
    return _unpack(fname, cell, _args(fname, args))


def pack_weights(cell: Cell, args: Mapping[str, Any]) -> dict[str, Any]:
    """Per-gate weights stacked again (MXNet's ``cell.pack_weights``): the inverse of
    ``unpack_weights``; for a fused cell it builds the flat ``{prefix}parameters`` vector.

    Returns:
        A new dict (``args`` is not changed); converted entries are new NDArrays.

    Example:
        >>> import numpy as np
        >>> from mxfn import rnn
        >>> c = rnn.fused_rnn_cell(2, mode="rnn_tanh")
        >>> parts = {"rnn_tanh_l0_i2h_weight": np.ones((2, 3)), "rnn_tanh_l0_h2h_weight": np.ones((2, 2)),
        ...          "rnn_tanh_l0_i2h_bias": np.ones(2), "rnn_tanh_l0_h2h_bias": np.ones(2)}
        >>> rnn.pack_weights(c, parts)["rnn_tanh_parameters"].shape  # 2·3 + 2·2 + 2 + 2
        (14,)
    """
    fname = "rnn.pack_weights"
    _cell(fname, "cell", cell)
    return _pack(fname, cell, _args(fname, args))


def _gates(cell: Cell) -> tuple[str, ...]:
    if isinstance(cell, LSTMCell):
        return GATES["lstm"]
    if isinstance(cell, GRUCell):
        return GATES["gru"]
    if isinstance(cell, RNNCell):
        return GATES["rnn_tanh"]
    return ()


def _unpack(fname: str, cell: Cell, args: dict[str, Any]) -> dict[str, Any]:
    if isinstance(cell, FusedRNNCell):
        return _unpack_fused(fname, cell, args)
    if isinstance(cell, (SequentialRNNCell, BidirectionalCell, ResidualCell, ZoneoutCell)):
        for c in children(cell):
            args = _unpack(fname, c, args)
        return args
    gates = _gates(cell)
    if not gates:  # a dropout cell has no weights
        return args
    h = cell.num_hidden  # type: ignore[attr-defined]
    p = cell.prefix  # type: ignore[attr-defined]
    for group in ("i2h", "h2h"):
        weight = _np(fname, args, f"{p}{group}_weight")
        bias = _np(fname, args, f"{p}{group}_bias")
        _rows(fname, f"{p}{group}_weight", weight, len(gates) * h)
        _rows(fname, f"{p}{group}_bias", bias, len(gates) * h)
        del args[f"{p}{group}_weight"], args[f"{p}{group}_bias"]
        for j, gate in enumerate(gates):
            args[f"{p}{group}{gate}_weight"] = _nd(weight[j * h:(j + 1) * h])
            args[f"{p}{group}{gate}_bias"] = _nd(bias[j * h:(j + 1) * h])
    return args


def _rows(fname: str, name: str, a: np.ndarray, want: int) -> None:
    if a.ndim < 1 or a.shape[0] != want:
        raise MXFNError(f'{fname}: "{name}" expects {want} rows (gates × num_hidden), got shape {a.shape}')


def _pack(fname: str, cell: Cell, args: dict[str, Any]) -> dict[str, Any]:
    if isinstance(cell, FusedRNNCell):
        return _pack_fused(fname, cell, args)
    if isinstance(cell, (SequentialRNNCell, BidirectionalCell, ResidualCell, ZoneoutCell)):
        for c in children(cell):
            args = _pack(fname, c, args)
        return args
    gates = _gates(cell)
    if not gates:
        return args
    p = cell.prefix  # type: ignore[attr-defined]
    for group in ("i2h", "h2h"):
        wnames = [f"{p}{group}{g}_weight" for g in gates]
        bnames = [f"{p}{group}{g}_bias" for g in gates]
        weights = [_np(fname, args, n) for n in wnames]
        biases = [_np(fname, args, n) for n in bnames]
        for n in wnames + bnames:
            del args[n]
        args[f"{p}{group}_weight"] = _nd(np.concatenate(weights))
        args[f"{p}{group}_bias"] = _nd(np.concatenate(biases))
    return args


def _fused_slices(cell: FusedRNNCell, li: int) -> tuple[list[tuple[str, int, tuple[int, ...]]], int]:
    """(name, offset, shape) of every part of the fused vector for input size ``li``, and its size."""
    gates = GATES[cell.mode]
    dirs = ("l", "r") if cell.bidirectional else ("l",)
    b, lh, p = len(dirs), cell.num_hidden, cell.prefix
    out: list[tuple[str, int, tuple[int, ...]]] = []
    off = 0
    for layer in range(cell.num_layers):
        for d in dirs:
            for g in gates:
                shape: tuple[int, ...] = (lh, li) if layer == 0 else (lh, b * lh)
                out.append((f"{p}{d}{layer}_i2h{g}_weight", off, shape))
                off += shape[0] * shape[1]
            for g in gates:
                out.append((f"{p}{d}{layer}_h2h{g}_weight", off, (lh, lh)))
                off += lh * lh
    for layer in range(cell.num_layers):
        for d in dirs:
            for group in ("i2h", "h2h"):
                for g in gates:
                    out.append((f"{p}{d}{layer}_{group}{g}_bias", off, (lh,)))
                    off += lh
    return out, off


def _unpack_fused(fname: str, cell: FusedRNNCell, args: dict[str, Any]) -> dict[str, Any]:
    name = f"{cell.params.prefix}parameters"
    arr = _np(fname, args, name).reshape(-1)
    b = 2 if cell.bidirectional else 1
    m, h, layers = len(GATES[cell.mode]), cell.num_hidden, cell.num_layers
    # MXNet's inversion of the size: size = b·m·h·(li + h + 2) + (L-1)·b·m·h·(b·h + h + 2).
    li = arr.size // b // h // m - (layers - 1) * (h + b * h + 2) - h - 2
    slices, total = _fused_slices(cell, max(li, 0))
    if li < 1 or total != arr.size:
        raise MXFNError(f'{fname}: "{name}" has {arr.size} values, which is no input size for a '
                        f"{cell.mode} cell of {layers} layer(s), {h} hidden, {b} direction(s)")
    del args[name]
    for n, off, shape in slices:
        size = int(np.prod(shape))
        args[n] = _nd(arr[off:off + size].reshape(shape))
    return args


def _pack_fused(fname: str, cell: FusedRNNCell, args: dict[str, Any]) -> dict[str, Any]:
    first = f"{cell.prefix}l0_i2h{GATES[cell.mode][0]}_weight"
    w0 = _np(fname, args, first)
    if w0.ndim != 2:
        raise MXFNError(f'{fname}: "{first}" expects a (num_hidden, input) matrix, got shape {w0.shape}')
    slices, total = _fused_slices(cell, w0.shape[1])
    arr = np.zeros(total, dtype=w0.dtype)
    parts = {n: _np(fname, args, n) for n, _, _ in slices}
    for n, off, shape in slices:
        a = parts[n]
        if a.shape != shape:
            raise MXFNError(f'{fname}: "{n}" expects shape {shape}, got {a.shape}')
        arr[off:off + a.size] = a.reshape(-1)
        del args[n]
    args[f"{cell.params.prefix}parameters"] = _nd(arr)
    return args

