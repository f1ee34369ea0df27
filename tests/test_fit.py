"""fit / score / predict / fit_params / history (mxfn._fit, re-exported by mx.module).

Every test runs twice: over a small stand-in module built on mx.executor (so the loops,
logging and callbacks are checked on their own), and over the real ``mxfn.module``.
"""

import importlib
import logging
import os
import re
import sys

import numpy as np
import pytest
import toolz

import mxfn as mx
from mxfn import _fit
from mxfn import callback as cb
from mxfn import metric as mt
from mxfn import monitor as mon_ns

N, DIM, CLASSES, BATCH = 50, 6, 3, 8   # 50 = 6 full batches + one with 6 samples of padding


# -- a stand-in module over mx.executor ---------------------------------------------------------

class FakeMod:
    def __init__(self, sym):
        self.sym, self.exe, self.params, self.updater, self.shapes = sym, None, None, None, None


class FakeNS:
    """The intermediate functions fit/score/predict use, over one executor."""

    @staticmethod
    def module(sym):
        return FakeMod(sym)

    @staticmethod
    def bind(mod, data_shapes, label_shapes=None, for_training=True, force_rebind=False):
        if mod.exe is not None and not force_rebind:
            return mod
        descs = [mx.io.as_data_desc(d) for d in data_shapes]
        shapes = {d["name"]: d["shape"] for d in descs + [mx.io.as_data_desc(d) for d in label_shapes or []]}
        shapes.setdefault("softmax_label", (descs[0]["shape"][0],))
        mod.exe = mx.executor.simple_bind(mod.sym, mx.cpu(), **shapes)
        mod.shapes = descs
        return mod

    @staticmethod
    def init_params(mod, initializer=None, arg_params=None, aux_params=None, allow_missing=False,
                    force_init=False):
        if mod.params is not None and not force_init:
            return mod
        rng = np.random.RandomState(0)
        shapes = {n: a.shape for n, a in mx.executor.arg_dict(mod.exe).items()
                  if n not in ("data", "softmax_label")}
        mod.params = {n: mx.nd.array(rng.uniform(-0.07, 0.07, s)) for n, s in shapes.items()}
        mod.params.update({k: mx.nd.array(v) for k, v in (arg_params or {}).items()})
        return mod

    @staticmethod
    def init_optimizer(mod, kvstore="local", optimizer="sgd", optimizer_params=None):
        if mod.updater is None:
            o = mx.optimizer.create(optimizer, optimizer_params) if isinstance(optimizer, str) else optimizer
            mx.optimizer.set_rescale_grad(o, 1.0 / mod.shapes[0]["shape"][0])
            mod.updater = mx.optimizer.get_updater(o)
        return mod

    @staticmethod
    def forward(mod, batch, is_train=None):
        inputs = {"data": mx.io.batch_data(batch)[0]}
        labels = mx.io.batch_label(batch)
        inputs["softmax_label"] = labels[0] if labels else np.zeros(mod.shapes[0]["shape"][0])
        mx.executor.forward(mod.exe, is_train=bool(is_train), **mod.params, **inputs)
        return mod

    @staticmethod
    def forward_backward(mod, batch):
        FakeNS.forward(mod, batch, is_train=True)
        mx.executor.backward(mod.exe)
        return mod

    @staticmethod
    def update(mod):
        grads = mx.executor.grad_dict(mod.exe)
        for i, n in enumerate(sorted(mod.params)):
            mod.params[n] = mod.updater(i, grads[n], mod.params[n])
        return mod

    @staticmethod
    def update_metric(mod, metric, labels):
        mt.update(metric, labels, mx.executor.outputs(mod.exe))
        return mod

    @staticmethod
    def outputs_merged(mod):
        return mx.executor.outputs(mod.exe)

    @staticmethod
    def get_params(mod):
        return {k: v.copy() for k, v in mod.params.items()}, {}

    @staticmethod
    def set_params(mod, arg_params, aux_params=None, **_):
        mod.params = {k: mx.nd.array(v) for k, v in arg_params.items()}
        return mod

    @staticmethod
    def data_shapes(mod):
        if mod.shapes is None:
            raise mx.MXFNError("module.data_shapes: the module is not bound; call bind first")
        return mod.shapes

    @staticmethod
    def data_names(mod):
        return ["data"]

    @staticmethod
    def symbol(mod):
        return mod.sym

    @staticmethod
    def contexts(mod):
        return [mx.cpu()]

    @staticmethod
    def install_monitor(mod, mon):
        # like mxfn.module: op outputs are hooked, and toc adds the params and their gradients
        mx.executor.set_monitor_callback(mod.exe, mon.stat_helper)
        grads = lambda: mx.executor.grad_dict(mod.exe)  # noqa: E731
        mon_ns.add_source(mon, ("module", id(mod)), lambda: [
            *mod.params.items(), *((f"{n}_grad", grads()[n]) for n in sorted(mod.params))])
        return mod

    @staticmethod
    def param_names(mod):
        return sorted(mod.params)

    @staticmethod
    def grad_arrays(mod):
        grads = mx.executor.grad_dict(mod.exe)
        return [[grads[n]] for n in sorted(mod.params)]

    @staticmethod
    def save_checkpoint(mod, prefix, epoch, save_opt_states=False):
        cb.save_checkpoint(prefix, epoch, mod.sym, mod.params, {})
        return mod


def _real_module():
    return importlib.import_module("mxfn.module")


@pytest.fixture(params=["fake", "real"])
def ns(request, monkeypatch):
    """The module namespace the high-level functions run over."""
    if request.param == "fake":
        monkeypatch.setattr(_fit, "_m", lambda: FakeNS)
        monkeypatch.setitem(sys.modules, "mxfn.module", FakeNS)
        return FakeNS
    return _real_module()


def _net():
    x = mx.sym.variable("data")
    return mx.sym.softmax_output(mx.sym.fully_connected(x, num_hidden=CLASSES, name="fc1"), name="softmax")


def _data(n=N, seed=0):
    rng = np.random.RandomState(seed)
    w = rng.normal(size=(DIM, CLASSES))
    x = rng.normal(size=(n, DIM)).astype(np.float32)
    y = np.argmax(x @ w, axis=1).astype(np.float32)
    return x, y


def _iter(n=N, seed=0, **kw):
    x, y = _data(n, seed)
    return mx.io.ndarray_iter(x, label=y, batch_size=BATCH, **kw)


class CountingIter(mx.io.DataIter):
    """Wraps an iterator, counting resets."""

    def __init__(self, it):
        self.it, self.resets, self.batch_size = it, 0, it.batch_size

    def next(self):
        return self.it.next()

    def has_next(self):
        return self.it.has_next()

    def reset(self):
        self.resets += 1
        self.it.reset()
        return self

    @property
    def provide_data(self):
        return self.it.provide_data

    @property
    def provide_label(self):
        return self.it.provide_label


def _messages(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "mxfn"]


# -- fit ------------------------------------------------------------------------------------

def test_fit_logs_trains_and_records_history(ns, caplog):
    mod = ns.module(_net())
    with caplog.at_level(logging.INFO, logger="mxfn"):
        out = _fit.fit(mod, _iter(), eval_data=_iter(seed=0), num_epoch=4,
                       optimizer_params={"learning_rate": 0.5})
    assert out is mod
    msgs = _messages(caplog)
    for e in range(4):
        assert any(re.fullmatch(rf"Epoch\[{e}\] Train-accuracy=\d\.\d{{6}}", s) for s in msgs)
        assert any(re.fullmatch(rf"Epoch\[{e}\] Time cost=\d+\.\d{{3}}", s) for s in msgs)
        assert any(re.fullmatch(rf"Epoch\[{e}\] Validation-accuracy=\d\.\d{{6}}", s) for s in msgs)
    h = _fit.history(mod)
    assert sorted(h) == ["time", "train-accuracy", "validation-accuracy"]
    assert all(len(v) == 4 for v in h.values())
    assert h["validation-accuracy"][-1] > 0.8 and h["train-accuracy"][-1] > h["train-accuracy"][0] - 1e-9
    # accumulated across fit calls; a copy each time
    _fit.fit(mod, _iter(), num_epoch=1)
    h2 = _fit.history(mod)
    assert len(h2["train-accuracy"]) == 5 and len(h2["validation-accuracy"]) == 4
    h2["time"].clear()
    assert len(_fit.history(mod)["time"]) == 5


def test_history_empty_before_fit(ns):
    assert _fit.history(ns.module(_net())) == {}


def test_fit_resets_before_every_epoch_and_eval(ns):
    train, val = CountingIter(_iter()), CountingIter(_iter(seed=1))
    mx.io.next(train.it)  # a half-consumed iterator still trains the full first epoch
    seen = []
    _fit.fit(ns.module(_net()), train, eval_data=val, num_epoch=3,
             batch_end_callback=lambda p: seen.append((p["epoch"], p["nbatch"])))
    assert train.resets == 3 and val.resets == 3
    assert seen == [(e, b) for e in range(3) for b in range(7)]


def test_fit_clojure_form_and_fit_params_map(ns, caplog):
    fp = _fit.fit_params(eval_metric="mse", begin_epoch=1)
    mod = ns.module(_net())
    with caplog.at_level(logging.INFO, logger="mxfn"):
        _fit.fit(mod, {"train_data": _iter(), "num_epoch": 3, "fit_params": fp, "eval-metric": "acc"})
    msgs = _messages(caplog)
    # begin_epoch=1 from the map: epochs 1 and 2; eval_metric given directly wins over the map
    assert [s.split()[0] for s in msgs if "Train-" in s] == ["Epoch[1]", "Epoch[2]"]
    assert all("Train-accuracy" in s for s in msgs if "Train-" in s)


def test_fit_option_errors(ns):
    mod = ns.module(_net())
    with pytest.raises(mx.MXFNError, match='unknown option "num_epochs"'):
        _fit.fit(mod, _iter(), num_epochs=2)
    with pytest.raises(mx.MXFNError, match="train_data"):
        _fit.fit(mod, num_epoch=1)
    with pytest.raises(mx.MXFNError, match="twice"):
        _fit.fit(mod, _iter(), train_data=_iter())
    with pytest.raises(TypeError, match="batch_end_callback"):
        _fit.fit(mod, _iter(), batch_end_callback=[3])


def test_fit_callbacks_get_mxnet_arguments(ns, tmp_path):
    epochs, evals, eval_batches = [], [], []
    prefix = str(tmp_path / "net")
    acc = mt.accuracy()

    def on_epoch(epoch, symbol, arg_params, aux_params):
        epochs.append((epoch, symbol.list_outputs(), sorted(arg_params), dict(aux_params)))

    _fit.fit(ns.module(_net()), _iter(), eval_data=_iter(seed=1), num_epoch=2, eval_metric=acc,
             validation_metric="ce",
             epoch_end_callback=[on_epoch, cb.do_checkpoint(prefix)],
             eval_end_callback=lambda p: evals.append((p.epoch, p.nbatch, mt.name(p.eval_metric))),
             eval_batch_end_callback=lambda p: eval_batches.append(p.nbatch))
    assert [e[0] for e in epochs] == [0, 1]
    assert epochs[0][1] == ["softmax_output"] and epochs[0][2] == ["fc1_bias", "fc1_weight"]
    assert evals == [(0, 7, "cross-entropy"), (1, 7, "cross-entropy")]
    assert eval_batches == list(range(7)) * 2
    assert sorted(os.listdir(tmp_path)) == ["net-0001.params", "net-0002.params", "net-symbol.json"]
    saved = mx.nd.load(prefix + "-0002.params")
    assert sorted(saved) == ["arg:fc1_bias", "arg:fc1_weight"]


def test_fit_with_speedometer_and_monitor(ns, caplog):
    mon = mon_ns.monitor(3, pattern="fc1_weight.*")
    with caplog.at_level(logging.INFO, logger="mxfn"):
        _fit.fit(ns.module(_net()), _iter(), num_epoch=1, monitor=mon,
                 batch_end_callback=cb.speedometer(BATCH, 2))
    msgs = _messages(caplog)
    speed = [s for s in msgs if "Speed" in s]
    assert [s.split("\t")[0] for s in speed] == ["Epoch[0] Batch [2]", "Epoch[0] Batch [4]", "Epoch[0] Batch [6]"]
    assert all(re.search(r"\taccuracy=\d\.\d{6}$", s) for s in speed)
    mon_lines = [s for s in msgs if s.startswith("Batch:")]
    # steps 1, 4, 7 are monitored: weight and its gradient each time
    assert len(mon_lines) == 6 and all("fc1_weight" in s for s in mon_lines)
    # speedometer's auto_reset does not change the epoch's Train- value (global metric)
    assert any(s.startswith("Epoch[0] Train-accuracy=") for s in msgs)


# -- score / predict ------------------------------------------------------------------------

def _trained(ns):
    mod = ns.module(_net())
    _fit.fit(mod, _iter(), num_epoch=2, optimizer_params={"learning_rate": 0.5})
    return mod


def test_predict_removes_padding_and_matches_forward(ns):
    mod = _trained(ns)
    x, y = _data(N, 3)
    it = mx.io.ndarray_iter(x, label=y, batch_size=BATCH)
    (out,) = _fit.predict(mod, eval_data=it)
    assert out.shape == (N, CLASSES)
    per = _fit.predict(mod, {"eval_data": it, "merge_batches": False})
    assert len(per) == 7 and [b[0].shape[0] for b in per] == [8] * 6 + [2]
    assert per == per and _fit.predict_every_batch(mod, eval_data=it)[3][0].shape == (8, CLASSES)
    np.testing.assert_allclose(np.concatenate([b[0].asnumpy() for b in per]), out.asnumpy(), rtol=1e-6)
    # arrays are batched with the bound batch size
    (out2,) = _fit.predict(mod, eval_data=x)
    np.testing.assert_allclose(out2.asnumpy(), out.asnumpy(), rtol=1e-6)
    (out3,) = _fit.predict(mod, eval_data=mx.nd.array(x[:11]))
    np.testing.assert_allclose(out3.asnumpy(), out.asnumpy()[:11], rtol=1e-6)
    # num_batch: None and -1 mean all
    assert _fit.predict(mod, eval_data=it, num_batch=2)[0].shape == (16, CLASSES)
    assert _fit.predict(mod, eval_data=it, num_batch=-1)[0].shape == (N, CLASSES)
    assert _fit.predict(mod, eval_data=it, num_batch=0) == []
    # rows sum to one (softmax) and predict_batch agrees on one batch
    np.testing.assert_allclose(out.asnumpy().sum(axis=1), 1.0, rtol=1e-5)
    mx.io.reset(it)
    b = mx.io.next(it)
    np.testing.assert_allclose(_fit.predict_batch(mod, b)[0].asnumpy(), out.asnumpy()[:8], rtol=1e-6)


def test_predict_reset_false_continues(ns):
    mod = _trained(ns)
    it = _iter()
    mx.io.reset(it)
    for _ in range(5):
        mx.io.next(it)
    assert _fit.predict(mod, eval_data=it, reset=False)[0].shape == (N - 40, CLASSES)


class _PyIter(mx.io.DataIter):
    """A Python-side iterator over a core one: prediction then runs batch by batch in Python."""

    def __init__(self, it):
        self.it, self.batch_size = it, it.batch_size

    def next(self):
        return mx.io.next(self.it)

    def has_next(self):
        return mx.io.has_next(self.it)

    def reset(self):
        mx.io.reset(self.it)
        return self


def test_predict_in_the_core_matches_the_python_loop():
    """A core iterator runs prediction in one native call (batches in pairs on two threads):
    the same outputs as the Python loop, bit for bit, and the module ends holding the last
    batch's outputs either way."""
    mod = _trained(_real_module())
    x, y = _data(N, 5)
    for kw in [{}, {"num_batch": 4}, {"num_batch": 5}]:
        it = mx.io.ndarray_iter(x, label=y, batch_size=BATCH)
        native = _fit.predict(mod, eval_data=it, **kw)[0].asnumpy()
        native_last = mx.module.outputs_merged(mod)[0].asnumpy()
        python = _fit.predict(mod, eval_data=_PyIter(it), **kw)[0].asnumpy()
        np.testing.assert_array_equal(native, python)
        np.testing.assert_array_equal(native_last, mx.module.outputs_merged(mod)[0].asnumpy())
        per = _fit.predict_every_batch(mod, eval_data=it, **kw)
        np.testing.assert_array_equal(np.concatenate([b[0].asnumpy() for b in per]), python)


def test_score_excludes_padding(ns):
    mod = _trained(ns)
    x, y = _data(N, 4)
    it = mx.io.ndarray_iter(x, label=y, batch_size=BATCH)
    (out,) = _fit.predict(mod, eval_data=it)
    expected = float(np.mean(np.argmax(out.asnumpy(), axis=1) == y))
    res = _fit.score(mod, eval_data=it, eval_metric="acc")
    assert res[0][0] == "accuracy" and res[0][1] == pytest.approx(expected)
    m = mt.accuracy()
    seen = []
    res2 = _fit.score(mod, {"eval_data": it, "eval_metric": m, "num_batch": 2, "epoch": 5,
                            "batch_end_callback": lambda p: seen.append((p.epoch, p.nbatch))})
    assert seen == [(5, 0), (5, 1)] and mt.get(m)[0] == "accuracy" and len(res2) == 1
    with pytest.raises(mx.MXFNError, match="eval_metric"):
        _fit.score(mod, eval_data=it)


def test_predict_needs_bound_module_for_arrays(ns):
    with pytest.raises(mx.MXFNError, match="bind"):
        _fit.predict(ns.module(_net()), eval_data=np.zeros((4, DIM)))


# -- fit_params / plot_history --------------------------------------------------------------

def test_fit_params_defaults_and_immutability():
    fp = _fit.fit_params()
    assert fp["eval_metric"] == "acc" and fp["validation_metric"] is None and fp["kvstore"] == "local"
    assert fp["optimizer"] == "sgd" and fp["optimizer_params"] == {"learning_rate": 0.01}
    assert fp["begin_epoch"] == 0 and fp["monitor"] is None and fp["allow_missing"] is False
    assert fp["initializer"] is not None
    with pytest.raises(TypeError):
        fp["optimizer"] = "adam"
    assert toolz.assoc(fp, "optimizer", "adam")["optimizer"] == "adam" and fp["optimizer"] == "sgd"
    kebab = _fit.fit_params({"batch-end-callback": print, "beginEpoch": 2})
    assert kebab["batch_end_callback"] is print and kebab["begin_epoch"] == 2
    with pytest.raises(mx.MXFNError, match="did you mean"):
        _fit.fit_params(optimiser="sgd")
    with pytest.raises(TypeError):
        _fit.fit_params(begin_epoch="1")
    with pytest.raises(mx.MXFNError):
        _fit.fit_params(begin_epoch=-1)


def test_plot_history_without_matplotlib(monkeypatch, tmp_path):
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(mx.MXFNError, match="matplotlib"):
        _fit.plot_history({"train-accuracy": [0.5]}, str(tmp_path / "h.png"))
    with pytest.raises(TypeError):
        _fit.plot_history([1, 2], str(tmp_path / "h.png"))


def test_plot_history_with_matplotlib(tmp_path):
    pytest.importorskip("matplotlib")
    f = str(tmp_path / "h.png")
    assert _fit.plot_history({"train-accuracy": [0.5, 0.7], "validation-accuracy": [0.4, 0.6],
                              "time": [1.0, 1.1]}, f) == f
    assert os.path.getsize(f) > 0


# -- the real mxfn.module only ---------------------------------------------------------------

def test_real_module_checkpoint_callback(tmp_path):
    m = _real_module()
    mod = m.module(_net())
    prefix = str(tmp_path / "mod")
    _fit.fit(mod, _iter(), num_epoch=2, epoch_end_callback=cb.module_checkpoint(mod, prefix, period=2))
    assert sorted(p for p in os.listdir(tmp_path) if not p.endswith(".states")) == ["mod-0002.params",
                                                                                   "mod-symbol.json"]
    args, _ = m.get_params(mod)
    saved = mx.nd.load(prefix + "-0002.params")
    np.testing.assert_allclose(saved["arg:fc1_weight"].asnumpy(), args["fc1_weight"].asnumpy())


def test_score_bare_array_with_label_free_metric(ns):
    mod = _trained(ns)
    x, _ = _data(N, 5)
    ((name, value),) = _fit.score(mod, eval_data=x, eval_metric="loss")
    (out,) = _fit.predict(mod, eval_data=x)
    assert name == "loss" and value == pytest.approx(float(out.asnumpy().sum()) / out.size, rel=1e-4)


def test_fit_with_optimizer_value(ns, caplog):
    mod = ns.module(_net())
    with caplog.at_level(logging.INFO, logger="mxfn"):
        _fit.fit(mod, _iter(), num_epoch=2, optimizer=mx.optimizer.sgd(learning_rate=0.5, momentum=0.9))
    assert len(_fit.history(mod)["train-accuracy"]) == 2


def test_real_multi_context_fit_predict_score():
    m = _real_module()
    mod = m.module(_net(), contexts=[mx.cpu(0), mx.cpu(1)])
    _fit.fit(mod, _iter(), eval_data=_iter(seed=1), num_epoch=2, optimizer_params={"learning_rate": 0.5})
    assert len(_fit.history(mod)["validation-accuracy"]) == 2
    x, y = _data(N, 1)
    (out,) = _fit.predict(mod, eval_data=x)
    assert out.shape == (N, CLASSES)
    names = [n for n, _ in _fit.score(mod, eval_data=_iter(seed=1), eval_metric=["acc", "ce"])]
    assert names == ["accuracy", "cross-entropy"]
    acc = dict(_fit.score(mod, eval_data=_iter(seed=1), eval_metric="acc"))["accuracy"]
    assert acc == pytest.approx(float(np.mean(np.argmax(out.asnumpy(), axis=1) == y)))


def test_fit_shows_progress_bar_and_speedometer_lines(caplog):
    """Issue 5's acceptance: a real fit run draws the tqdm bar and logs speedometer lines."""
    import io as _io
    import logging

    import mxfn as mx
    from mxfn import module as m

    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.float32)
    it = mx.io.ndarray_iter(x, label=y, batch_size=20)
    net = mx.sym.softmax_output(mx.sym.fully_connected(mx.sym.variable("data"), num_hidden=2, name="fc"),
                                name="softmax")
    out = _io.StringIO()
    with caplog.at_level(logging.INFO, logger="mxfn"):
        m.fit(m.module(net), it, num_epoch=2,
              batch_end_callback=[mx.callback.speedometer(20, 5),
                                  mx.callback.progress_bar(total=10, file=out, mininterval=0.0)])
    speed = [r.getMessage() for r in caplog.records if "Speed:" in r.getMessage()]
    assert speed and speed[0].startswith("Epoch[0] Batch [5]\tSpeed: ") and "samples/sec\taccuracy=" in speed[0]
    bar = out.getvalue()
    assert "Epoch[0]" in bar and "Epoch[1]" in bar and "10/10" in bar and "batch/s" in bar
