"""mx.curried: the module namespace with the module argument last."""

import importlib
import inspect

import numpy as np
import toolz

import mxfn as mx
from mxfn import curried as c

# SPEC §2's table: every name mx.curried has.
SPEC_NAMES = {
    "module", "bucketing_module", "data_names", "label_names", "output_names", "data_shapes",
    "label_shapes", "output_shapes", "symbol", "contexts", "bind", "init_params", "init_optimizer",
    "forward", "backward", "forward_backward", "update", "update_metric", "outputs", "outputs_merged",
    "input_grads", "input_grads_merged", "grad_arrays", "get_params", "params", "arg_params",
    "aux_params", "set_params", "reshape", "install_monitor", "borrow_optimizer",
    "save_optimizer_states", "load_optimizer_states", "save_checkpoint", "load_checkpoint",
    "fit_params", "fit", "score", "predict", "predict_every_batch", "predict_batch", "history",
}


def _module():
    return importlib.import_module("mxfn.module")


def test_expected_names_are_the_spec_table():
    assert set(c.EXPECTED) == SPEC_NAMES and len(c.EXPECTED) == len(SPEC_NAMES)


def test_has_every_name_of_the_spec_table_and_no_extras():
    m = _module()
    assert sorted(n for n in SPEC_NAMES if not hasattr(m, n)) == []
    assert {n for n in dir(c) if n in SPEC_NAMES} == SPEC_NAMES
    assert set(c.__all__) == SPEC_NAMES


def test_module_last_moves_the_module_to_the_end():
    calls = []

    def f(mod, a, b=0, /, **kw):
        calls.append((mod, a, b, kw))
        return mod

    g = c.module_last(f)
    assert g(1, 2, x=3)("MOD") == "MOD"
    assert calls == [("MOD", 1, 2, {"x": 3})]
    assert g.__name__ == "f" and "module" in g.__doc__


def test_every_curried_function_calls_the_module_function_with_the_module_first(monkeypatch):
    # Record what each wrapped mxfn.module function receives: c.<name>(*args, **kw)(mod)
    # must call mxfn.module.<name>(mod, *args, **kw) and return its result.
    m = _module()
    seen = []
    for name in c.MODULE_FIRST:
        def recording(mod, *args, _name=name, **kw):
            seen.append((_name, mod, args, kw))
            return ("result", _name)
        monkeypatch.setattr(m, name, recording)
    rebuilt = importlib.reload(c)
    try:
        for name in c.MODULE_FIRST:
            assert getattr(rebuilt, name)("a", k=1)("MOD") == ("result", name)
        assert seen == [(name, "MOD", ("a",), {"k": 1}) for name in c.MODULE_FIRST]
    finally:
        monkeypatch.undo()
        importlib.reload(c)


def test_functions_without_module_are_unchanged():
    m = _module()
    assert c.NO_MODULE == ("module", "bucketing_module", "load_checkpoint", "fit_params")
    for name in c.NO_MODULE:
        assert getattr(c, name) is getattr(m, name)


def test_curried_history_and_fit_params():
    assert c.history()(object.__new__(type("M", (), {}))) == {}
    assert c.fit_params(begin_epoch=1)["begin_epoch"] == 1


def test_pipe_end_to_end_with_real_module():
    m = _module()
    rng = np.random.RandomState(0)
    x = rng.normal(size=(40, 5)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.float32)
    train = mx.io.ndarray_iter(x, label=y, batch_size=8)
    net = mx.sym.softmax_output(mx.sym.fully_connected(mx.sym.variable("data"), num_hidden=2, name="fc"),
                                name="softmax")
    mod = toolz.pipe(m.module(net),
                     c.bind(data_shapes=mx.io.provide_data(train), label_shapes=mx.io.provide_label(train)),
                     c.init_params(),
                     c.fit(train, num_epoch=2, optimizer_params={"learning_rate": 0.5}))
    assert len(c.history()(mod)["train-accuracy"]) == 2
    (out,) = c.predict(eval_data=train)(mod)
    assert out.shape == (40, 2)
    assert inspect.isfunction(c.score)
