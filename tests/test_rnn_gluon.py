"""Gluon's exported recurrent layers (issue #13): every ``gluon.rnn`` layer kind MXNet 1.9.1
exports — LSTM, GRU, RNN relu/tanh at 1 and 2 layers, one and both directions, TNC and NTC,
with the caller's begin states and with Gluon's default ones — and a language model written as
Gluon users write it, load in mxfn through ``module.load_checkpoint`` and predict what MXNet
predicted. The reverse direction: mxfn's ``save_checkpoint`` loads in Gluon's
``SymbolBlock.imports`` and predicts the same there.

The Module-era model (``mx.rnn`` cells unrolled, MXNet's bucketing example, saved by
``save_checkpoint``) is covered by tests/test_rnn_cells.py
(test_mxnet_bucketing_checkpoint_predicts_the_same_in_mxfn and the reverse test next to it).

One MXNet process records every case, so the MXNet side costs one interpreter start.
"""

import itertools
import json
import subprocess

import numpy as np
import pytest

import mxfn as mx
from mxfn import module as m

from conftest import MXNET_PYTHON

BATCH, LENGTH, IN_DIM, HIDDEN = 3, 5, 4, 6

KINDS = {"lstm": "LSTM(%d, %s)", "gru": "GRU(%d, %s)",
         "relu": "RNN(%d, activation='relu', %s)", "tanh": "RNN(%d, activation='tanh', %s)"}

# name -> (gluon layer kind, num_layers, bidirectional, layout, begin states given)
LAYER_CASES = {
    f"{kind}_l{layers}_{'bi' if bi else 'uni'}_{layout.lower()}_{'states' if st else 'default'}":
        (kind, layers, bi, layout, st)
    for kind, layers, bi, layout, st in itertools.product(KINDS, (1, 2), (False, True), ("TNC", "NTC"),
                                                          (False, True))
}

# A word-level language model as the Gluon tutorials write it; "states" returns the final
# states too (the tutorial's detach-and-feed-back loop), "default" lets the layer make zeros.
LM = {"vocab": 11, "embed": 5, "hidden": 7, "layers": 2}
LM_CASES = ("lm_default", "lm_states")

RECORD = r'''
import json, os, sys
import numpy as np
import mxnet as mx
from mxnet import gluon

out_dir, layer_cases = sys.argv[1], json.loads(sys.argv[2])
B, T, C, H = %(B)d, %(T)d, %(C)d, %(H)d
KINDS = json.loads(sys.argv[3])
LM = json.loads(sys.argv[4])


def record(name, net, inputs, layouts, default_states=None):
    """Export ``net`` after one hybridized forward; save its inputs and outputs in order.
    Gluon feeds a layer's default begin states to the graph as inputs like the caller's
    (``default_states``: the zeros it makes), so the export needs them as data too."""
    net.hybridize()
    out = net(*inputs)
    flat_in = [a for x in inputs for a in (x if isinstance(x, list) else [x])] + (default_states or [])
    flat_out = [a for o in (out if isinstance(out, (list, tuple)) else [out])
                for a in (o if isinstance(o, (list, tuple)) else [o])]
    net.export(os.path.join(out_dir, name))
    mx.nd.save(os.path.join(out_dir, name + "-in.params"), flat_in)
    mx.nd.save(os.path.join(out_dir, name + "-out.params"), flat_out)
    sym = mx.sym.load(os.path.join(out_dir, name + "-symbol.json"))
    params = mx.nd.load(os.path.join(out_dir, name + "-0000.params"))
    inputs = [n for n in sym.list_inputs() if "arg:" + n not in params and "aux:" + n not in params]
    assert len(inputs) == len(flat_in) == len(layouts), (name, inputs)
    return {"inputs": inputs, "outputs": sym.list_outputs(), "layouts": layouts}


def random_states(net, batch, rng):
    # the layer's own begin_state fixes the count and shapes; random values make them count
    return [mx.nd.array(rng.uniform(-1, 1, size=s.shape)) for s in net.begin_state(batch_size=batch)]


meta = {}
for i, (name, (kind, layers, bi, layout, st)) in enumerate(sorted(layer_cases.items())):
    mx.random.seed(10 + i)
    rng = np.random.RandomState(10 + i)
    net = eval("gluon.rnn." + KINDS[kind] %% (H, "num_layers=%%d, bidirectional=%%s, layout=%%r"
                                               %% (layers, bi, layout)))
    net.initialize(mx.init.Uniform(0.5))
    x = mx.nd.array(rng.uniform(-1, 1, size=(B, T, C) if layout == "NTC" else (T, B, C)))
    # states are (layers * directions, batch, hidden): their batch axis is the N of TNC
    layouts = [layout] + ["TNC"] * len(net.state_info())
    if st:
        meta[name] = record(name, net, [x, random_states(net, B, rng)], layouts)
    else:
        meta[name] = record(name, net, [x], layouts, net.begin_state(batch_size=B))


class LanguageModel(gluon.HybridBlock):
    def __init__(self, vocab, embed, hidden, layers, **kw):
        super().__init__(**kw)
        self.hidden = hidden
        with self.name_scope():
            self.encoder = gluon.nn.Embedding(vocab, embed)
            self.drop = gluon.nn.Dropout(0.3)
            self.rnn = gluon.rnn.LSTM(hidden, num_layers=layers, dropout=0.2, input_size=embed)
            self.decoder = gluon.nn.Dense(vocab, in_units=hidden)

    def hybrid_forward(self, F, x, *state):
        emb = self.drop(self.encoder(x))
        if state:
            out, state = self.rnn(emb, list(state))
        else:
            out = self.rnn(emb)
        dec = self.decoder(self.drop(out).reshape((-1, self.hidden)))
        return (dec, *state) if state else dec


for name in ("lm_default", "lm_states"):
    mx.random.seed(3)
    rng = np.random.RandomState(3)
    net = LanguageModel(LM["vocab"], LM["embed"], LM["hidden"], LM["layers"])
    net.initialize(mx.init.Xavier())
    x = mx.nd.array(rng.randint(0, LM["vocab"], size=(T, B)))
    states = random_states(net.rnn, B, rng) if name == "lm_states" else []
    meta[name] = record(name, net, [x] + states, ["TN"] + ["TNC"] * len(states))
json.dump(meta, open(os.path.join(out_dir, "meta.json"), "w"))
''' % {"B": BATCH, "T": LENGTH, "C": IN_DIM, "H": HIDDEN}

# mxfn's checkpoints in Gluon: SymbolBlock.imports, one forward per case, outputs saved.
IMPORT = r'''
import json, os, sys
import mxnet as mx
from mxnet import gluon

for prefix, names in json.loads(sys.argv[1]):
    net = gluon.SymbolBlock.imports(prefix + "-symbol.json", names, prefix + "-0001.params")
    out = net(*mx.nd.load(prefix + "-in.params"))
    out = list(out) if isinstance(out, (list, tuple)) else [out]
    mx.nd.save(prefix + "-gluon.params", out)
'''


def _run_mxnet(code, *args):
    out = subprocess.run([str(MXNET_PYTHON), "-c", code, *args], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"MXNet failed:\n{out.stderr[-3000:]}"
    return out.stdout


@pytest.fixture(scope="session")
def gluon_cases(mxnet_python, tmp_path_factory):
    """Every case exported by Gluon: ``name-symbol.json``, ``name-0000.params``, its inputs
    and MXNet's outputs; meta gives each case's input and output names."""
    d = tmp_path_factory.mktemp("rnn_gluon")
    _run_mxnet(RECORD, str(d), json.dumps(LAYER_CASES), json.dumps(KINDS), json.dumps(LM))
    return d, json.loads((d / "meta.json").read_text())


def _np(x):
    return np.asarray(x.asnumpy() if hasattr(x, "asnumpy") else x)


def _predict(d, case, meta):
    """Load Gluon's export of ``case`` as a Module, bind it to the recorded inputs (with their
    layouts: the batch is axis 1 of a TNC sequence and of every state), forward."""
    names = meta["inputs"]
    inputs = [_np(a) for a in mx.nd.load(str(d / f"{case}-in.params"))]
    mod = m.load_checkpoint(str(d / case), 0, data_names=names, label_names=None)
    descs = [mx.io.data_desc(n, a.shape, layout=lay) for n, a, lay in zip(names, inputs, meta["layouts"])]
    m.bind(mod, data_shapes=descs, for_training=False)
    m.forward(mod, {"data": inputs}, is_train=False)
    return mod, inputs, [_np(o) for o in m.outputs_merged(mod)]


def _check(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", sorted(LAYER_CASES) + list(LM_CASES))
def test_gluon_export_predicts_the_same_in_mxfn(case, gluon_cases):
    d, meta = gluon_cases
    mod, _, got = _predict(d, case, meta[case])
    assert m.output_names(mod) == meta[case]["outputs"]
    if case in LAYER_CASES:
        # Gluon makes even its default begin states graph inputs: the sequence, then h (and c)
        assert meta[case]["inputs"] == ["data0", "data1", "data2"][:3 if case.startswith("lstm") else 2]
    _check(got, [_np(w) for w in mx.nd.load(str(d / f"{case}-out.params"))])


REVERSE_CASES = ("lstm_l2_bi_ntc_states", "lm_states", "gru_l1_uni_tnc_default")


@pytest.fixture(scope="session")
def mxfn_to_gluon(gluon_cases, tmp_path_factory):
    """REVERSE_CASES loaded in mxfn, saved by mxfn's save_checkpoint, imported by Gluon's
    SymbolBlock and run there (one MXNet process): case -> (mxfn outputs, Gluon outputs)."""
    d, meta = gluon_cases
    out = tmp_path_factory.mktemp("rnn_gluon_back")
    jobs, got = [], {}
    for case in REVERSE_CASES:
        mod, inputs, got[case] = _predict(d, case, meta[case])
        prefix = str(out / case)
        m.save_checkpoint(mod, prefix=prefix, epoch=1)
        mx.nd.save(prefix + "-in.params", inputs)
        jobs.append([prefix, meta[case]["inputs"]])
    _run_mxnet(IMPORT, json.dumps(jobs))
    return {c: (got[c], [_np(o) for o in mx.nd.load(str(out / f"{c}-gluon.params"))]) for c in REVERSE_CASES}


@pytest.mark.parametrize("case", REVERSE_CASES)
def test_mxfn_checkpoint_predicts_the_same_in_gluon(case, mxfn_to_gluon):
    mine, gluons = mxfn_to_gluon[case]
    _check(gluons, mine)
