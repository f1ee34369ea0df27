"""mx.rnn cells: immutable values describing MXNet 1.9.1's ``mx.rnn`` cells and their weights
(as named variables); states.py has their state layouts and begin states.

A cell holds its weight variables, created once when the cell is made, so every time step of
an unrolled graph uses the same variable nodes (a graph with two variables of one name cannot
be bound). Names follow MXNet: weights ``{prefix}i2h_weight``, ``{prefix}i2h_bias``,
``{prefix}h2h_weight``, ``{prefix}h2h_bias`` (a fused cell: ``{prefix}parameters``), begin
states ``{prefix}begin_state_{i}``.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from .. import initializer, symbol
from .._errors import MXFNError
from .._opts import documented, opt, parse_opts
from ..symbol import Symbol

MODES = ("rnn_relu", "rnn_tanh", "lstm", "gru")

# Gate order inside a stacked weight (MXNet's ``_gate_names``): rows [j*h, (j+1)*h) are gate j.
GATES = {"rnn_relu": ("",), "rnn_tanh": ("",), "lstm": ("_i", "_f", "_c", "_o"),
         "gru": ("_r", "_z", "_o")}


class RNNParams:
    """Weight variables shared between cells (MXNet's ``mx.rnn.RNNParams``).

    ``get(name)`` returns the variable ``prefix + name``, the same Symbol every time, so cells
    given one RNNParams share their weights. Its value is its prefix: the cache only keeps one
    variable node per name (the first call's ``init`` wins, as in MXNet).

    Example:
        >>> p = rnn_params("shared_")
        >>> p.get("i2h_weight") is p.get("i2h_weight"), p.get("i2h_weight").name
        (True, 'shared_i2h_weight')
    """

    __slots__ = ("_prefix", "_vars")
    _prefix: str
    _vars: dict[str, Symbol]

    def __init__(self, prefix: str = "") -> None:
        if not isinstance(prefix, str):
            raise TypeError(f"rnn.rnn_params: prefix must be a str, got {type(prefix).__name__}")
        object.__setattr__(self, "_prefix", prefix)
        object.__setattr__(self, "_vars", {})

    @property
    def prefix(self) -> str:
        return self._prefix

    def get(self, name: str, init: Any = None) -> Symbol:
        """The variable ``prefix + name`` (created on first use, with ``init`` if given)."""
        full = self._prefix + name
        found = self._vars.get(full)
        if found is None:
            made = symbol.variable(full, init=init) if init is not None else symbol.variable(full)
            found = self._vars.setdefault(full, made)
        return found

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError(f"'RNNParams' object is read-only; cannot set attribute {name!r}")

    def __repr__(self) -> str:
        return f"RNNParams(prefix={self._prefix!r})"


def rnn_params(prefix: str = "") -> RNNParams:
    """A weight container to share between cells (MXNet's ``RNNParams(prefix)``): cells made
    with ``params=p`` name their weights ``p.prefix + "i2h_weight"``, … and share them.

    Example:
        >>> p = rnn_params("tied_")
        >>> a, b = lstm_cell(4, params=p), lstm_cell(4, prefix="b_", params=p)
        >>> a.i2h_weight is b.i2h_weight
        True
    """
    return RNNParams(prefix)


class Cell:
    """Base of every cell value (for isinstance checks)."""

    __slots__ = ()


@dataclass(frozen=True)
class RNNCell(Cell):
    """A plain recurrent cell (MXNet's ``RNNCell``); made by ``rnn_cell``."""

    num_hidden: int
    activation: Union[str, Callable[..., Symbol]]
    prefix: str
    params: RNNParams = field(repr=False)
    i2h_weight: Symbol = field(repr=False)
    i2h_bias: Symbol = field(repr=False)
    h2h_weight: Symbol = field(repr=False)
    h2h_bias: Symbol = field(repr=False)


@dataclass(frozen=True)
class LSTMCell(Cell):
    """A long short-term memory cell (MXNet's ``LSTMCell``); made by ``lstm_cell``."""

    num_hidden: int
    prefix: str
    forget_bias: float
    params: RNNParams = field(repr=False)
    i2h_weight: Symbol = field(repr=False)
    i2h_bias: Symbol = field(repr=False)
    h2h_weight: Symbol = field(repr=False)
    h2h_bias: Symbol = field(repr=False)


@dataclass(frozen=True)
class GRUCell(Cell):
    """A gated recurrent unit cell, cuDNN's variant (MXNet's ``GRUCell``); made by ``gru_cell``."""

    num_hidden: int
    prefix: str
    params: RNNParams = field(repr=False)
    i2h_weight: Symbol = field(repr=False)
    i2h_bias: Symbol = field(repr=False)
    h2h_weight: Symbol = field(repr=False)
    h2h_bias: Symbol = field(repr=False)


@dataclass(frozen=True)
class FusedRNNCell(Cell):
    """Several layers run by the fused ``RNN`` operator (MXNet's ``FusedRNNCell``)."""

    num_hidden: int
    num_layers: int
    mode: str
    bidirectional: bool
    dropout: float
    get_next_state: bool
    forget_bias: float
    prefix: str
    params: RNNParams = field(repr=False)
    parameters: Symbol = field(repr=False)


@dataclass(frozen=True)
class SequentialRNNCell(Cell):
    """Cells stacked, each one's output the next one's input (MXNet's ``SequentialRNNCell``)."""

    cells: tuple[Cell, ...]


@dataclass(frozen=True)
class BidirectionalCell(Cell):
    """A forward and a backward cell over the same sequence (MXNet's ``BidirectionalCell``)."""

    l_cell: Cell
    r_cell: Cell
    output_prefix: str


@dataclass(frozen=True)
class DropoutCell(Cell):
    """Dropout on the inputs, no state (MXNet's ``DropoutCell``)."""

    dropout: float
    prefix: str


@dataclass(frozen=True)
class ResidualCell(Cell):
    """A cell whose output is its base cell's output plus its input (MXNet's ``ResidualCell``)."""

    base_cell: Cell


@dataclass(frozen=True)
class ZoneoutCell(Cell):
    """Zoneout on a base cell's outputs and states (MXNet's ``ZoneoutCell``)."""

    base_cell: Cell
    zoneout_outputs: float
    zoneout_states: float


_DENSE = (RNNCell, LSTMCell, GRUCell)
_MODIFIERS = (ResidualCell, ZoneoutCell)


# -- option checks ------------------------------------------------------------------------

def positive_int(fname: str, key: str, value: Any) -> int:
    """``value`` as an int >= 1, or an error naming ``key``, what it expects and what it got."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f'{fname}: "{key}" expects a positive int, got {type(value).__name__} {value!r}')
    if value < 1:
        raise MXFNError(f'{fname}: "{key}" expects a positive int, got {value!r}')
    return int(value)


def _fraction(fname: str, key: str, value: float, top_open: bool = True) -> float:
    ok = 0.0 <= value < 1.0 if top_open else 0.0 <= value <= 1.0
    if not ok:
        want = "a number in [0, 1)" if top_open else "a number in [0, 1]"
        raise MXFNError(f'{fname}: option "{key}" expects {want}, got {value!r}')
    return float(value)


def _cell(fname: str, key: str, value: Any) -> Cell:
    if not isinstance(value, Cell):
        raise TypeError(f'{fname}: "{key}" expects a cell (rnn.lstm_cell(...), …), '
                        f"got {type(value).__name__} {value!r}")
    return value


# -- constructors -------------------------------------------------------------------------

def _weights(params: RNNParams, i2h_bias_init: Any = None) -> dict[str, Symbol]:
    # MXNet creates them in this order (i2h_weight, i2h_bias, h2h_weight, h2h_bias for RNN and
    # GRU; the LSTM asks for h2h_weight before i2h_bias): only the attrs matter, not the order.
    return {"i2h_weight": params.get("i2h_weight"),
            "i2h_bias": params.get("i2h_bias", i2h_bias_init),
            "h2h_weight": params.get("h2h_weight"),
            "h2h_bias": params.get("h2h_bias")}


def _params(o: Mapping[str, Any]) -> RNNParams:
    return o["params"] if o["params"] is not None else RNNParams(o["prefix"])


RNN_OPTS = {
    "activation": opt("tanh", None, 'act_type of an Activation ("tanh", "relu", …) or a function '
                      "f(x, name=...) -> Symbol"),
    "prefix": opt("rnn_", str, "prefix of node names (and of weight names when params is None)"),
    "params": opt(None, RNNParams, "weights shared with other cells (rnn_params); None = new ones"),
}


@documented(RNN_OPTS)
def rnn_cell(num_hidden: int, opts: Mapping[str, Any] | None = None, /, **kw: Any) -> RNNCell:
    """A plain recurrent cell: ``out = act(W_i x + b_i + W_h h + b_h)`` (MXNet's ``RNNCell``).

    %OPTIONS%

    Returns:
        An RNNCell with one state, ``(0, num_hidden)`` in layout NC.

    Example:
        >>> c = rnn_cell(8, activation="relu")
        >>> c.prefix, c.i2h_weight.name, c.activation
        ('rnn_', 'rnn_i2h_weight', 'relu')
    """
    fname = "rnn.rnn_cell"
    o = parse_opts(fname, RNN_OPTS, opts, kw)
    h = positive_int(fname, "num_hidden", num_hidden)
    act = o["activation"]
    if not isinstance(act, str) and not callable(act):
        raise TypeError(f'{fname}: option "activation" expects an act_type str or a function, '
                        f"got {type(act).__name__} {act!r}")
    p = _params(o)
    return RNNCell(h, act, o["prefix"], p, **_weights(p))


LSTM_OPTS = {
    "prefix": opt("lstm_", str, "prefix of node names (and of weight names when params is None)"),
    "forget_bias": opt(1.0, float, "added to the forget gate's bias at initialisation "
                       '(the i2h_bias variable gets MXNet\'s ["lstmbias", …] initializer)'),
    "params": opt(None, RNNParams, "weights shared with other cells (rnn_params); None = new ones"),
}


@documented(LSTM_OPTS)
def lstm_cell(num_hidden: int, opts: Mapping[str, Any] | None = None, /, **kw: Any) -> LSTMCell:
    """A long short-term memory cell (MXNet's ``LSTMCell``): gates i, f, c, o in that order.

    %OPTIONS%

    Returns:
        An LSTMCell with two states (h, then c), each ``(0, num_hidden)`` in layout NC.

    Example:
        >>> c = lstm_cell(4, prefix="lstm_l0_")
        >>> c.i2h_bias.name, c.i2h_bias.attr("__init__")
        ('lstm_l0_i2h_bias', '["lstmbias", {"forget_bias": 1.0}]')
    """
    fname = "rnn.lstm_cell"
    o = parse_opts(fname, LSTM_OPTS, opts, kw)
    h = positive_int(fname, "num_hidden", num_hidden)
    p = _params(o)
    fb = float(o["forget_bias"])
    return LSTMCell(h, o["prefix"], fb, p, **_weights(p, initializer.lstm_bias(forget_bias=fb)))


GRU_OPTS = {
    "prefix": opt("gru_", str, "prefix of node names (and of weight names when params is None)"),
    "params": opt(None, RNNParams, "weights shared with other cells (rnn_params); None = new ones"),
}


@documented(GRU_OPTS)
def gru_cell(num_hidden: int, opts: Mapping[str, Any] | None = None, /, **kw: Any) -> GRUCell:
    """A gated recurrent unit cell in cuDNN's form (MXNet's ``GRUCell``): gates r, z, then the
    candidate, the reset gate applied to ``W_h h + b_h``.

    %OPTIONS%

    Returns:
        A GRUCell with one state, ``(0, num_hidden)`` in layout NC.

    Example:
        >>> gru_cell(3).h2h_bias.name
        'gru_h2h_bias'
    """
    fname = "rnn.gru_cell"
    o = parse_opts(fname, GRU_OPTS, opts, kw)
    h = positive_int(fname, "num_hidden", num_hidden)
    p = _params(o)
    return GRUCell(h, o["prefix"], p, **_weights(p))


FUSED_OPTS = {
    "num_layers": opt(1, int, "number of stacked layers"),
    "mode": opt("lstm", str, '"lstm", "gru", "rnn_relu" or "rnn_tanh"'),
    "bidirectional": opt(False, bool, "a backward layer beside each forward one (outputs 2 × num_hidden)"),
    "dropout": opt(0.0, float, "dropout between layers, in training (the RNN operator's p)"),
    "get_next_state": opt(False, bool, "unroll also returns the final states (state_outputs)"),
    "forget_bias": opt(1.0, float, "forget-gate bias at initialisation (lstm)"),
    "prefix": opt(None, str, 'prefix of names; None = mode + "_"'),
    "params": opt(None, RNNParams, "weights shared with other cells (rnn_params); None = new ones"),
}


@documented(FUSED_OPTS)
def fused_rnn_cell(num_hidden: int, opts: Mapping[str, Any] | None = None, /,
                   **kw: Any) -> FusedRNNCell:
    """Layers run over the whole sequence by the fused ``RNN`` operator (MXNet's
    ``FusedRNNCell``): one weight variable ``{prefix}parameters`` holding MXNet's flat vector.

    It cannot be stepped; ``unfuse`` gives the equivalent stack of plain cells (same weights,
    named per layer and gate by ``unpack_weights``). Unrolling it needs the ``RNN`` operator.

    %OPTIONS%

    Returns:
        A FusedRNNCell with one state (two for lstm), ``(layers × directions, 0, num_hidden)``
        in layout LNC.

    Example:
        >>> c = fused_rnn_cell(4, num_layers=2, mode="gru")
        >>> c.prefix, c.parameters.name
        ('gru_', 'gru_parameters')
    """
    fname = "rnn.fused_rnn_cell"
    o = parse_opts(fname, FUSED_OPTS, opts, kw)
    h = positive_int(fname, "num_hidden", num_hidden)
    layers = positive_int(fname, "num_layers", o["num_layers"])
    mode = o["mode"]
    if mode not in MODES:
        raise MXFNError(f'{fname}: option "mode" expects one of {", ".join(map(repr, MODES))}, got {mode!r}')
    dropout = _fraction(fname, "dropout", o["dropout"])
    prefix = o["prefix"] if o["prefix"] is not None else mode + "_"
    p = o["params"] if o["params"] is not None else RNNParams(prefix)
    # MXNet's init.FusedRNN(None, …) as its dumps() writes it, so a saved symbol initialises
    # the same way when MXNet loads it.
    init = json.dumps(["fusedrnn", {"init": None, "num_hidden": h, "num_layers": layers, "mode": mode,
                                    "bidirectional": o["bidirectional"], "forget_bias": float(o["forget_bias"])}])
    return FusedRNNCell(h, layers, mode, o["bidirectional"], dropout, o["get_next_state"],
                        float(o["forget_bias"]), prefix, p, p.get("parameters", init))


def sequential_rnn_cell(cells: Sequence[Cell]) -> SequentialRNNCell:
    """Cells applied in turn, each one's output the next one's input (MXNet's
    ``SequentialRNNCell`` after ``add``-ing each cell). Its states are the cells' states in order.

    Example:
        >>> s = sequential_rnn_cell([lstm_cell(4, prefix=f"lstm_l{i}_") for i in range(2)])
        >>> [c.prefix for c in s.cells]
        ['lstm_l0_', 'lstm_l1_']
    """
    fname = "rnn.sequential_rnn_cell"
    if isinstance(cells, Cell) or not isinstance(cells, (list, tuple)):
        raise TypeError(f'{fname}: "cells" expects a list of cells, got {type(cells).__name__}')
    return SequentialRNNCell(tuple(_cell(fname, f"cells[{i}]", c) for i, c in enumerate(cells)))


BI_OPTS = {"output_prefix": opt("bi_", str, "prefix of the output nodes (``{output_prefix}t{i}`` "
                                "or ``{output_prefix}out``)")}


@documented(BI_OPTS)
def bidirectional_cell(l_cell: Cell, r_cell: Cell, opts: Mapping[str, Any] | None = None, /,
                       **kw: Any) -> BidirectionalCell:
    """``l_cell`` over the sequence and ``r_cell`` over it reversed, outputs concatenated on the
    feature axis (MXNet's ``BidirectionalCell``). It cannot be stepped, only unrolled.

    %OPTIONS%

    Returns:
        A BidirectionalCell; its states are ``l_cell``'s then ``r_cell``'s.

    Example:
        >>> b = bidirectional_cell(gru_cell(3, prefix="l_"), gru_cell(3, prefix="r_"))
        >>> b.output_prefix, b.l_cell.prefix
        ('bi_', 'l_')
    """
    fname = "rnn.bidirectional_cell"
    o = parse_opts(fname, BI_OPTS, opts, kw)
    return BidirectionalCell(_cell(fname, "l_cell", l_cell), _cell(fname, "r_cell", r_cell),
                             o["output_prefix"])


DROPOUT_OPTS = {"prefix": opt("dropout_", str, "prefix of the cell (MXNet names nothing with it)")}


@documented(DROPOUT_OPTS)
def dropout_cell(dropout: float, opts: Mapping[str, Any] | None = None, /,
                 **kw: Any) -> DropoutCell:
    """Dropout with probability ``dropout`` on the inputs, in training (MXNet's
    ``DropoutCell``); no state, and no node at all when ``dropout`` is 0.

    %OPTIONS%

    Example:
        >>> dropout_cell(0.5).dropout
        0.5
    """
    fname = "rnn.dropout_cell"
    o = parse_opts(fname, DROPOUT_OPTS, opts, kw)
    if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real):
        raise TypeError(f'{fname}: "dropout" expects a number, got {type(dropout).__name__} {dropout!r}')
    return DropoutCell(_fraction(fname, "dropout", dropout), o["prefix"])


def residual_cell(cell: Cell) -> ResidualCell:
    """``cell`` with a residual connection: output = cell's output + input, node
    ``{output name}_plus_residual`` (MXNet's ``ResidualCell``, Wu et al. 2016).

    Example:
        >>> residual_cell(gru_cell(3)).base_cell.prefix
        'gru_'
    """
    return ResidualCell(_cell("rnn.residual_cell", "cell", cell))


ZONEOUT_OPTS = {
    "zoneout_outputs": opt(0.0, float, "probability of keeping the previous output, in training"),
    "zoneout_states": opt(0.0, float, "probability of keeping the previous states, in training"),
}


@documented(ZONEOUT_OPTS)
def zoneout_cell(cell: Cell, opts: Mapping[str, Any] | None = None, /, **kw: Any) -> ZoneoutCell:
    """Zoneout on ``cell`` (MXNet's ``ZoneoutCell``): in training, each output (state) element
    keeps its previous value with the given probability; in inference it is ``cell`` itself.

    As MXNet, a fused or bidirectional cell is refused (neither can be stepped). Unlike MXNet
    1.9.1, whose check raises AttributeError on any SequentialRNNCell, a sequential cell of
    steppable cells is accepted.

    %OPTIONS%

    Example:
        >>> zoneout_cell(lstm_cell(4), zoneout_states=0.3).zoneout_states
        0.3
    """
    fname = "rnn.zoneout_cell"
    o = parse_opts(fname, ZONEOUT_OPTS, opts, kw)
    base = _cell(fname, "cell", cell)
    bad = _unsteppable(base)
    if bad is not None:
        raise MXFNError(f"{fname}: a {type(bad).__name__} cannot be stepped, so it cannot take "
                        "zoneout; put zoneout cells on the cells underneath (unfuse a fused cell first)")
    return ZoneoutCell(base, _fraction(fname, "zoneout_outputs", o["zoneout_outputs"], False),
                       _fraction(fname, "zoneout_states", o["zoneout_states"], False))


def _unsteppable(cell: Cell) -> Cell | None:
    """The first fused or bidirectional cell inside ``cell``, or None."""
    if isinstance(cell, (FusedRNNCell, BidirectionalCell)):
        return cell
    for c in children(cell):
        bad = _unsteppable(c)
        if bad is not None:
            return bad
    return None


def children(cell: Cell) -> tuple[Cell, ...]:
    """The cells directly inside ``cell`` (none for a leaf cell)."""
    if isinstance(cell, SequentialRNNCell):
        return cell.cells
    if isinstance(cell, BidirectionalCell):
        return (cell.l_cell, cell.r_cell)
    if isinstance(cell, _MODIFIERS):
        return (cell.base_cell,)
    return ()
