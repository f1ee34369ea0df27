"""mx.rnn: MXNet 1.9.1's ``mx.rnn`` recurrent cells, as immutable values and functions.

Cells (``lstm_cell``, ``gru_cell``, ``rnn_cell``, ``fused_rnn_cell``, ``sequential_rnn_cell``,
``bidirectional_cell``, ``dropout_cell``, ``residual_cell``, ``zoneout_cell``) are values; the
functions take the cell first and an option map last: ``unroll(cell, length, opts)``,
``step(cell, inputs, states)``, ``begin_state(cell, opts)``, ``state_info(cell)``,
``unfuse(cell)``, ``pack_weights(cell, args)``, ``unpack_weights(cell, args)``. The graphs
they build name parameters, outputs and states exactly as MXNet's (``lstm_l0_i2h_weight``,
``lstm_l0_t2_out``, ``lstm_l0_begin_state_0``), so checkpoints move both ways.

Example:
    >>> import mxfn as mx
    >>> from mxfn import rnn
    >>> stack = rnn.sequential_rnn_cell([rnn.lstm_cell(8, prefix=f"lstm_l{i}_") for i in range(2)])
    >>> outs, states = rnn.unroll(stack, 3, inputs=mx.sym.var("data"), merge_outputs=True,
    ...                           begin_state=rnn.begin_state(stack, func=mx.sym.var))
    >>> [a for a in outs.list_arguments() if "weight" in a]
    ['lstm_l0_i2h_weight', 'lstm_l0_h2h_weight', 'lstm_l1_i2h_weight', 'lstm_l1_h2h_weight']
    >>> [s.name for s in states]
    ['lstm_l0_t2_out', 'lstm_l0_t2_state', 'lstm_l1_t2_out', 'lstm_l1_t2_state']
"""

from .cells import (BidirectionalCell, Cell, DropoutCell, FusedRNNCell, GRUCell, LSTMCell, RNNCell,
                    RNNParams, ResidualCell, SequentialRNNCell, ZoneoutCell, bidirectional_cell,
                    dropout_cell, fused_rnn_cell, gru_cell, lstm_cell, residual_cell, rnn_cell, rnn_params,
                    sequential_rnn_cell, zoneout_cell)
from .encode import encode_sentences
from .fused import pack_weights, unfuse, unpack_weights
from .states import begin_state, state_info
from .unroll import step, unroll

__all__ = ["lstm_cell", "gru_cell", "rnn_cell", "fused_rnn_cell", "sequential_rnn_cell",
           "bidirectional_cell", "dropout_cell", "residual_cell", "zoneout_cell", "rnn_params",
           "unroll", "step", "begin_state", "state_info", "unfuse", "pack_weights", "unpack_weights",
           "encode_sentences", "Cell", "RNNCell", "LSTMCell", "GRUCell", "FusedRNNCell",
           "SequentialRNNCell", "BidirectionalCell", "DropoutCell", "ResidualCell", "ZoneoutCell",
           "RNNParams"]
