"""mx.rnn states: each cell's state layout (``state_info``) and its begin states
(``begin_state``), named and shaped as MXNet 1.9.1's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import symbol
from .._errors import MXFNError
from .._maps import FrozenMap
from .._opts import documented, opt, parse_opts
from ..symbol import Symbol
from .cells import _DENSE, Cell, DropoutCell, FusedRNNCell, GRUCell, LSTMCell, RNNCell, _cell, children


# -- states -------------------------------------------------------------------------------

def state_info(cell: Cell) -> list[FrozenMap]:
    """Shape and layout of each state, in order (MXNet's ``cell.state_info``): read-only maps
    ``{"shape": …, "__layout__": …}`` where 0 is the batch size, left to shape inference.

    Example:
        >>> from mxfn import rnn
        >>> state_info(rnn.lstm_cell(4))
        [{'shape': (0, 4), '__layout__': 'NC'}, {'shape': (0, 4), '__layout__': 'NC'}]
        >>> state_info(rnn.fused_rnn_cell(5, num_layers=2, bidirectional=True, mode="gru"))
        [{'shape': (4, 0, 5), '__layout__': 'LNC'}]
    """
    _cell("rnn.state_info", "cell", cell)
    return [FrozenMap(shape=s, __layout__=lay) for s, lay in _state_info(cell)]


def _state_info(cell: Cell) -> list[tuple[tuple[int, ...], str]]:
    if isinstance(cell, LSTMCell):
        return [((0, cell.num_hidden), "NC")] * 2
    if isinstance(cell, (RNNCell, GRUCell)):
        return [((0, cell.num_hidden), "NC")]
    if isinstance(cell, FusedRNNCell):
        n = 2 if cell.mode == "lstm" else 1
        b = 2 if cell.bidirectional else 1
        return [((b * cell.num_layers, 0, cell.num_hidden), "LNC")] * n
    if isinstance(cell, DropoutCell):
        return []
    return [i for c in children(cell) for i in _state_info(c)]


def num_states(cell: Cell) -> int:
    """How many state symbols ``cell`` takes (and ``begin_state`` makes)."""
    return len(_state_info(cell))


BEGIN_OPTS = {
    "func": opt(None, None, 'makes each state: func(name, {"shape": shape, "attr": {"__layout__": '
                "layout}}) -> Symbol, so mx.sym.var fits; None = a _zeros node as MXNet's symbol.zeros"),
    "dtype": opt("float32", None, "dtype of the default zeros"),
}


@documented(BEGIN_OPTS)
def begin_state(cell: Cell, opts: Mapping[str, Any] | None = None, /, **kw: Any) -> list[Symbol]:
    """The initial states of ``cell`` (MXNet's ``cell.begin_state()``): one symbol per state,
    named ``{prefix}begin_state_{i}`` with ``i`` counting the states of each prefix, by default
    ``_zeros`` nodes of the ``state_info`` shape with a 0 batch size for shape inference to fill,
    and ``__layout__`` set, exactly as MXNet writes them.

    ``func=mx.sym.var`` makes them variables (MXNet's ``begin_state(func=mx.sym.Variable)``), to
    feed the states as inputs; any other function of ``(name, opts)`` may build them, e.g. zeros
    of a known batch size.

    %OPTIONS%

    Returns:
        A flat list of symbols, in ``state_info`` order.

    Example:
        >>> import mxfn as mx
        >>> from mxfn import rnn
        >>> [s.name for s in begin_state(rnn.lstm_cell(4), func=mx.sym.var)]
        ['lstm_begin_state_0', 'lstm_begin_state_1']
    """
    fname = "rnn.begin_state"
    o = parse_opts(fname, BEGIN_OPTS, opts, kw)
    _cell(fname, "cell", cell)
    func = o["func"]
    if func is not None and not callable(func):
        raise TypeError(f'{fname}: option "func" expects a function (name, opts) -> Symbol or None, '
                        f"got {type(func).__name__} {func!r}")
    counters: dict[str, int] = {}
    out = []
    for prefix, shape, layout in _state_slots(cell):
        i = counters.get(prefix, 0)
        counters[prefix] = i + 1
        name = f"{prefix}begin_state_{i}"
        if func is None:
            try:
                s = symbol._zeros(name=name, shape=shape, dtype=o["dtype"], attr={"__layout__": layout})
            except MXFNError as e:
                raise MXFNError(f'{fname}: state "{name}" of shape {shape} (0 = the batch size, left '
                                f"to shape inference as in MXNet): {e}. Pass begin_state to unroll, "
                                "or func= to build the states another way") from e
        else:
            s = func(name, {"shape": shape, "attr": {"__layout__": layout}})
            if not isinstance(s, Symbol):
                raise TypeError(f'{fname}: option "func" returned {type(s).__name__}, expected a Symbol')
        out.append(s)
    return out


def _state_slots(cell: Cell) -> list[tuple[str, tuple[int, ...], str]]:
    """(prefix that names it, shape, layout) for every state of ``cell``."""
    if isinstance(cell, (*_DENSE, FusedRNNCell)):
        return [(cell.prefix, s, lay) for s, lay in _state_info(cell)]
    return [slot for c in children(cell) for slot in _state_slots(c)]
