"""mx.rnn stepping and unrolling: the graphs MXNet 1.9.1's cells build, node for node.

Node names follow MXNet: step ``t`` of a cell with prefix ``p`` names its nodes ``{p}t{t}_…``
(``lstm_t0_i2h``, ``lstm_t0_slice``, ``lstm_t0_state``, ``lstm_t0_out``; a GRU's
``gru_t0__i2h`` with MXNet's double underscore); unnamed helper nodes get automatic names.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Union

from .. import symbol
from .._errors import MXFNError
from .._opts import REQUIRED, documented, opt, parse_opts
from ..symbol import Symbol
from .cells import (BidirectionalCell, Cell, DropoutCell, FusedRNNCell, GRUCell, LSTMCell, RNNCell,
                    ResidualCell, SequentialRNNCell, ZoneoutCell, _cell, children, positive_int)
from .states import begin_state, num_states

Outputs = Union[Symbol, list[Symbol]]

# Zoneout keeps each zoneout cell's previous output (MXNet keeps it on the cell object): one
# dict per unroll, keyed by the cell value's id, as MXNet's is per object.
_Memo = dict[int, Symbol]


# -- one step -----------------------------------------------------------------------------

STEP_OPTS = {"t": opt(0, int, "the step's index: names its nodes {prefix}t{t}_… as MXNet's t-th call")}


@documented(STEP_OPTS)
def step(cell: Cell, inputs: Symbol, states: Sequence[Any], opts: Mapping[str, Any] | None = None, /,
         **kw: Any) -> tuple[Symbol, list[Any]]:
    """One time step of ``cell`` (MXNet's ``cell(inputs, states)``).

    ``inputs`` is one step's input (batch, features); ``states`` the previous states (from
    ``begin_state`` or an earlier step). Fused and bidirectional cells cannot be stepped (as in
    MXNet). A zoneout cell's output zoneout looks at its previous output, which MXNet keeps
    inside the cell and ``unroll`` threads: ``step`` knows it only at ``t=0`` (zeros).

    %OPTIONS%

    Returns:
        ``(output, new_states)``.

    Example:
        >>> import mxfn as mx
        >>> from mxfn import rnn
        >>> c = rnn.lstm_cell(4)
        >>> out, st = rnn.step(c, mx.sym.var("x"), rnn.begin_state(c, func=mx.sym.var), t=2)
        >>> out.name, [s.name for s in st]
        ('lstm_t2_out', ['lstm_t2_out', 'lstm_t2_state'])
    """
    fname = "rnn.step"
    o = parse_opts(fname, STEP_OPTS, opts, kw)
    _cell(fname, "cell", cell)
    t = o["t"]
    if t < 0:
        raise MXFNError(f'{fname}: option "t" expects an int >= 0, got {t!r}')
    if not isinstance(inputs, Symbol):
        raise TypeError(f'{fname}: "inputs" expects a Symbol, got {type(inputs).__name__}')
    states = _check_states(fname, "states", cell, states)
    if t > 0 and _has_output_zoneout(cell):
        raise MXFNError(f"{fname}: a zoneout cell with zoneout_outputs needs its output of the previous "
                        "step, which only unroll threads; unroll the cell instead")
    return _step(fname, cell, inputs, list(states), t, {})


def _has_output_zoneout(cell: Cell) -> bool:
    if isinstance(cell, ZoneoutCell) and cell.zoneout_outputs != 0.0:
        return True
    return any(_has_output_zoneout(c) for c in children(cell))


def _check_states(fname: str, key: str, cell: Cell, states: Any) -> list[Any]:
    if isinstance(states, Symbol) or not isinstance(states, (list, tuple)):
        raise TypeError(f'{fname}: "{key}" expects a list of Symbols, got {type(states).__name__}')
    # Flat, as begin_state makes them; a bidirectional cell's final states ([l_states, r_states])
    # are accepted as they come and flattened.
    flat = _flatten(states)
    want = num_states(cell)
    if len(flat) != want:
        raise MXFNError(f'{fname}: "{key}" expects {want} state symbols for this cell, got {len(flat)}')
    bad = [s for s in flat if not isinstance(s, Symbol)]
    if bad:
        raise TypeError(f'{fname}: "{key}" expects Symbols, got {type(bad[0]).__name__} {bad[0]!r}')
    return flat


def _flatten(states: Sequence[Any]) -> list[Any]:
    out = []
    for s in states:
        out.extend(_flatten(s) if isinstance(s, (list, tuple)) else [s])
    return out


def _fc(data: Symbol, w: Symbol, b: Symbol, n: int, name: str) -> Symbol:
    return symbol.FullyConnected(data=data, weight=w, bias=b, num_hidden=n, name=name)


def _act(x: Symbol, act: str, name: str | None = None) -> Symbol:
    return symbol.Activation(x, act_type=act, name=name) if name else symbol.Activation(x, act_type=act)


def _step(fname: str, cell: Cell, x: Symbol, states: list[Any], t: int,
          memo: _Memo) -> tuple[Symbol, list[Any]]:
    if isinstance(cell, RNNCell):
        name = f"{cell.prefix}t{t}_"
        i2h = _fc(x, cell.i2h_weight, cell.i2h_bias, cell.num_hidden, name + "i2h")
        h2h = _fc(states[0], cell.h2h_weight, cell.h2h_bias, cell.num_hidden, name + "h2h")
        if isinstance(cell.activation, str):
            out = _act(i2h + h2h, cell.activation, name + "out")
        else:
            out = cell.activation(i2h + h2h, name=name + "out")
        return out, [out]
    if isinstance(cell, LSTMCell):
        name = f"{cell.prefix}t{t}_"
        h = cell.num_hidden
        i2h = _fc(x, cell.i2h_weight, cell.i2h_bias, 4 * h, name + "i2h")
        h2h = _fc(states[0], cell.h2h_weight, cell.h2h_bias, 4 * h, name + "h2h")
        gates = symbol.SliceChannel(i2h + h2h, num_outputs=4, name=name + "slice")
        in_gate = _act(gates[0], "sigmoid", name + "i")
        forget_gate = _act(gates[1], "sigmoid", name + "f")
        in_transform = _act(gates[2], "tanh", name + "c")
        out_gate = _act(gates[3], "sigmoid", name + "o")
        next_c = symbol.elemwise_add(forget_gate * states[1], in_gate * in_transform, name=name + "state")
        next_h = symbol.elemwise_mul(out_gate, _act(next_c, "tanh"), name=name + "out")
        return next_h, [next_h, next_c]
    if isinstance(cell, GRUCell):
        name = f"{cell.prefix}t{t}_"
        h = cell.num_hidden
        prev = states[0]
        i2h = _fc(x, cell.i2h_weight, cell.i2h_bias, 3 * h, f"{name}_i2h")
        h2h = _fc(prev, cell.h2h_weight, cell.h2h_bias, 3 * h, f"{name}_h2h")
        i2h_r, i2h_z, i2h_n = symbol.SliceChannel(i2h, num_outputs=3, name=f"{name}_i2h_slice")
        h2h_r, h2h_z, h2h_n = symbol.SliceChannel(h2h, num_outputs=3, name=f"{name}_h2h_slice")
        reset_gate = _act(i2h_r + h2h_r, "sigmoid", f"{name}_r_act")
        update_gate = _act(i2h_z + h2h_z, "sigmoid", f"{name}_z_act")
        next_h_tmp = _act(i2h_n + reset_gate * h2h_n, "tanh", f"{name}_h_act")
        next_h = symbol.elemwise_add((1.0 - update_gate) * next_h_tmp, update_gate * prev, name=f"{name}out")
        return next_h, [next_h]
    if isinstance(cell, SequentialRNNCell):
        new_states: list[Any] = []
        p = 0
        for c in cell.cells:
            if isinstance(c, BidirectionalCell):
                raise MXFNError(f"{fname}: a bidirectional cell cannot be stepped; unroll the sequence instead")
            n = num_states(c)
            x, st = _step(fname, c, x, states[p:p + n], t, memo)
            p += n
            new_states.extend(st)
        return x, new_states
    if isinstance(cell, DropoutCell):
        if cell.dropout > 0:
            x = symbol.Dropout(data=x, p=cell.dropout)
        return x, states
    if isinstance(cell, ResidualCell):
        out, st = _step(fname, cell.base_cell, x, states, t, memo)
        return symbol.elemwise_add(out, x, name=f"{out.name}_plus_residual"), st
    if isinstance(cell, ZoneoutCell):
        return _zoneout_step(fname, cell, x, states, t, memo)
    raise MXFNError(f"{fname}: a {type(cell).__name__} cannot be stepped (as in MXNet); use unroll")


def _zoneout_step(fname: str, cell: ZoneoutCell, x: Symbol, states: list[Any], t: int,
                  memo: _Memo) -> tuple[Symbol, list[Any]]:
    next_output, next_states = _step(fname, cell.base_cell, x, states, t, memo)

    def mask(p: float, like: Symbol) -> Symbol:
        # Dropout of ones: in training 0 with probability p (else 1/(1-p)), in inference 1.
        return symbol.Dropout(symbol.ones_like(like), p=p)

    output = next_output
    if cell.zoneout_outputs != 0.0:
        # MXNet starts from symbol.zeros((0, 0)), a creation node whose shape inference fills;
        # zeros_like(next_output) is the same value and needs no inference from consumers.
        prev = memo.get(id(cell))
        if prev is None:
            prev = symbol.zeros_like(next_output)
        output = symbol.where(mask(cell.zoneout_outputs, next_output), next_output, prev)
    if cell.zoneout_states != 0.0:
        next_states = [symbol.where(mask(cell.zoneout_states, new), new, old)
                       for new, old in zip(next_states, states)]
    memo[id(cell)] = output
    return output, next_states


# -- sequences ----------------------------------------------------------------------------

def _time_axis(fname: str, layout: str) -> int:
    if not isinstance(layout, str) or layout.count("T") != 1 or layout.count("N") != 1:
        raise MXFNError(f'{fname}: option "layout" expects a layout with one T and one N axis '
                        f'("NTC" or "TNC"), got {layout!r}')
    return layout.find("T")


def normalize_sequence(length: int, inputs: Any, layout: str, merge: bool | None,
                       fname: str = "rnn.unroll") -> tuple[Outputs, int]:
    """MXNet's ``_normalize_sequence``: a list of per-step symbols when ``merge`` is False (a
    merged symbol is split on the time axis), one symbol when ``merge`` is True (a list is
    stacked on the time axis), unchanged when ``merge`` is None. Returns it and the time axis."""
    axis = _time_axis(fname, layout)
    if isinstance(inputs, Symbol):
        if merge is False:
            if len(inputs.list_outputs()) != 1:
                raise MXFNError(f'{fname}: "inputs" is a grouped symbol; give a list of symbols '
                                "(list(inputs)) or one symbol to split")
            inputs = list(symbol.SliceChannel(inputs, axis=axis, num_outputs=length, squeeze_axis=1))
    else:
        if not isinstance(inputs, (list, tuple)) or not all(isinstance(s, Symbol) for s in inputs):
            raise TypeError(f'{fname}: "inputs" expects a Symbol or a list of Symbols, got {inputs!r}')
        if len(inputs) != length:
            raise MXFNError(f'{fname}: "inputs" expects {length} symbols (one per step), got {len(inputs)}')
        inputs = list(inputs)
        if merge is True:
            inputs = symbol.Concat(*[symbol.expand_dims(s, axis=axis) for s in inputs], dim=axis)
    return inputs, axis


UNROLL_OPTS = {
    "inputs": opt(REQUIRED, None, "one symbol, (batch, length, …) for NTC or (length, batch, …) for "
                  "TNC, or a list of length symbols (batch, …)"),
    "begin_state": opt(None, (list, tuple), "the initial states; None = begin_state(cell)"),
    "layout": opt("NTC", str, 'layout of a merged input and output: "NTC" or "TNC"'),
    "merge_outputs": opt(None, bool, "True: one symbol; False: a list of length symbols; None: "
                         "whichever the cell makes (a list for plain cells)"),
}


@documented(UNROLL_OPTS)
def unroll(cell: Cell, length: int, opts: Mapping[str, Any] | None = None, /,
           **kw: Any) -> tuple[Outputs, list[Any]]:
    """``cell`` unrolled over ``length`` steps (MXNet's ``cell.unroll(length, inputs, …)``).

    Step ``t`` names its nodes ``{prefix}t{t}_…``; every step uses the cell's weight
    variables. As MXNet: a sequential cell unrolls each cell in turn (only the last one told
    ``merge_outputs``), a bidirectional cell returns its states as ``[l_states, r_states]``, a
    fused cell runs the ``RNN`` operator over TNC data (NTC is swapped, with MXNet's warning).

    %OPTIONS%

    Returns:
        ``(outputs, states)``: a list of symbols or one symbol, and the final states.

    Example:
        >>> import mxfn as mx
        >>> from mxfn import rnn
        >>> c = rnn.gru_cell(4)
        >>> outs, st = rnn.unroll(c, 3, inputs=mx.sym.var("x"), begin_state=rnn.begin_state(c, func=mx.sym.var))
        >>> [o.name for o in outs], st[0].name
        (['gru_t0_out', 'gru_t1_out', 'gru_t2_out'], 'gru_t2_out')
    """
    fname = "rnn.unroll"
    o = parse_opts(fname, UNROLL_OPTS, opts, kw)
    _cell(fname, "cell", cell)
    n = positive_int(fname, "length", length)
    _time_axis(fname, o["layout"])
    begin = o["begin_state"]
    if begin is not None:
        begin = _check_states(fname, "begin_state", cell, begin)
    return _unroll(fname, cell, n, o["inputs"], begin, o["layout"], o["merge_outputs"])


def _unroll(fname: str, cell: Cell, length: int, inputs: Any, begin: list[Any] | None, layout: str,
            merge: bool | None) -> tuple[Outputs, list[Any]]:
    if isinstance(cell, SequentialRNNCell):
        return _unroll_sequential(fname, cell, length, inputs, begin, layout, merge)
    if isinstance(cell, BidirectionalCell):
        return _unroll_bidirectional(fname, cell, length, inputs, begin, layout, merge)
    if isinstance(cell, FusedRNNCell):
        return _unroll_fused(fname, cell, length, inputs, begin, layout, merge)
    if isinstance(cell, DropoutCell):
        merged, _ = normalize_sequence(length, inputs, layout, merge, fname)
        if isinstance(merged, Symbol):
            return _step(fname, cell, merged, [], 0, {})
    if isinstance(cell, ResidualCell):
        return _unroll_residual(fname, cell, length, inputs, begin, layout, merge)
    return _unroll_steps(fname, cell, length, inputs, begin, layout, merge)


def _unroll_steps(fname: str, cell: Cell, length: int, inputs: Any, begin: list[Any] | None, layout: str,
                  merge: bool | None) -> tuple[Outputs, list[Any]]:
    """BaseRNNCell.unroll: split the inputs, step ``length`` times, merge the outputs if asked."""
    steps, _ = normalize_sequence(length, inputs, layout, False, fname)
    states = begin if begin is not None else begin_state(cell)
    memo: _Memo = {}
    outputs = []
    for t in range(length):
        out, states = _step(fname, cell, steps[t], states, t, memo)
        outputs.append(out)
    merged, _ = normalize_sequence(length, outputs, layout, merge, fname)
    return merged, states


def _unroll_sequential(fname: str, cell: SequentialRNNCell, length: int, inputs: Any,
                       begin: list[Any] | None, layout: str, merge: bool | None) -> tuple[Outputs, list[Any]]:
    begin = begin if begin is not None else begin_state(cell)
    p = 0
    next_states: list[Any] = []
    last = len(cell.cells) - 1
    for i, c in enumerate(cell.cells):
        n = num_states(c)
        inputs, st = _unroll(fname, c, length, inputs, begin[p:p + n], layout, merge if i == last else None)
        p += n
        next_states.extend(st)
    return inputs, next_states


def _unroll_residual(fname: str, cell: ResidualCell, length: int, inputs: Any, begin: list[Any] | None,
                     layout: str, merge: bool | None) -> tuple[Outputs, list[Any]]:
    outputs, states = _unroll(fname, cell.base_cell, length, inputs, begin, layout, merge)
    merge = isinstance(outputs, Symbol) if merge is None else merge
    if merge:
        out, xs = _merged(fname, length, outputs, layout), _merged(fname, length, inputs, layout)
        return symbol.elemwise_add(out, xs, name=f"{out.name}_plus_residual"), states
    return [symbol.elemwise_add(o, i, name=f"{o.name}_plus_residual") for o, i in
            zip(_steps(fname, length, outputs, layout), _steps(fname, length, inputs, layout))], states


def _merged(fname: str, length: int, seq: Outputs, layout: str) -> Symbol:
    """``seq`` as one symbol on the layout's time axis (a symbol is returned as is)."""
    out, _ = normalize_sequence(length, seq, layout, True, fname)
    if not isinstance(out, Symbol):
        raise MXFNError(f"{fname}: internal error: merging {length} steps gave no symbol")
    return out


def _steps(fname: str, length: int, seq: Outputs, layout: str) -> list[Symbol]:
    """``seq`` as a list of per-step symbols (a merged symbol is split on the time axis)."""
    out, _ = normalize_sequence(length, seq, layout, False, fname)
    if isinstance(out, Symbol):
        raise MXFNError(f"{fname}: internal error: splitting {length} steps gave one symbol")
    return out


def _unroll_bidirectional(fname: str, cell: BidirectionalCell, length: int, inputs: Any,
                          begin: list[Any] | None, layout: str,
                          merge: bool | None) -> tuple[Outputs, list[Any]]:
    steps, axis = normalize_sequence(length, inputs, layout, False, fname)
    begin = begin if begin is not None else begin_state(cell)
    n_l = num_states(cell.l_cell)
    l_out, l_states = _unroll(fname, cell.l_cell, length, steps, begin[:n_l], layout, merge)
    r_out, r_states = _unroll(fname, cell.r_cell, length, list(reversed(steps)), begin[n_l:], layout, merge)
    if merge is None:
        merge = isinstance(l_out, Symbol) and isinstance(r_out, Symbol)
        if not merge:
            if isinstance(l_out, Symbol):
                l_out = list(symbol.SliceChannel(l_out, axis=axis, num_outputs=length, squeeze_axis=1))
            if isinstance(r_out, Symbol):
                r_out = list(symbol.SliceChannel(r_out, axis=axis, num_outputs=length, squeeze_axis=1))
    if merge:
        l_sym, r_sym = _merged(fname, length, l_out, layout), _merged(fname, length, r_out, layout)
        out = symbol.Concat(l_sym, symbol.reverse(r_sym, axis=axis), dim=2, name=f"{cell.output_prefix}out")
        return out, [l_states, r_states]
    l_list = _steps(fname, length, l_out, layout)
    r_list = _steps(fname, length, r_out, layout)
    outs = [symbol.Concat(lo, ro, dim=1, name=f"{cell.output_prefix}t{i}")
            for i, (lo, ro) in enumerate(zip(l_list, reversed(r_list)))]
    return outs, [l_states, r_states]


def _unroll_fused(fname: str, cell: FusedRNNCell, length: int, inputs: Any, begin: list[Any] | None,
                  layout: str, merge: bool | None) -> tuple[Outputs, list[Any]]:
    data, axis = normalize_sequence(length, inputs, layout, True, fname)
    if axis == 1:
        warnings.warn("NTC layout detected. Consider using TNC for FusedRNNCell for faster speed",
                      stacklevel=3)
        data = symbol.SwapAxis(data, dim1=0, dim2=1)
    elif axis != 0:
        raise MXFNError(f'{fname}: a fused cell takes layout "NTC" or "TNC", got {layout!r}')
    states = begin if begin is not None else begin_state(cell)
    named = {"state": states[0]}
    if cell.mode == "lstm":
        named["state_cell"] = states[1]
    # MXNet sets __layout__ = LNC on the state outputs, i.e. on the RNN node itself.
    attr = {"__layout__": "LNC"} if cell.get_next_state else {}
    rnn = symbol.RNN(data=data, parameters=cell.parameters, state_size=cell.num_hidden,
                     num_layers=cell.num_layers, bidirectional=cell.bidirectional, p=cell.dropout,
                     state_outputs=cell.get_next_state, mode=cell.mode, name=cell.prefix + "rnn",
                     attr=attr, **named)
    outputs: Outputs
    if not cell.get_next_state:
        outputs, out_states = rnn, []
    elif cell.mode == "lstm":
        outputs, out_states = rnn[0], [rnn[1], rnn[2]]
    else:
        outputs, out_states = rnn[0], [rnn[1]]
    if axis == 1:
        outputs = symbol.SwapAxis(outputs, dim1=0, dim2=1)
    outputs, _ = normalize_sequence(length, outputs, layout, merge, fname)
    return outputs, out_states

