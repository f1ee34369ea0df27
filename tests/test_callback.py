"""mx.callback: speedometer, progress_bar, checkpoints, log_train_metric, BatchEndParam."""

import io as _io
import logging
import os
import re

import numpy as np
import pytest

import mxfn as mx
from mxfn import callback as cb
from mxfn import metric as mt


def _acc(n_right, n):
    acc = mt.accuracy()
    labels = np.zeros(n)
    preds = np.zeros((n, 2))
    preds[:n_right, 0] = 1
    preds[n_right:, 1] = 1
    mt.update(acc, [labels], [preds])
    return acc


def test_batch_end_param_is_read_only_map_with_attributes():
    p = cb.batch_end_param(2, 5, None, {"x": 1})
    assert dict(p) == {"epoch": 2, "nbatch": 5, "eval_metric": None, "locals": {"x": 1}}
    assert (p.epoch, p.nbatch, p.locals) == (2, 5, {"x": 1})
    with pytest.raises(TypeError):
        p["epoch"] = 3


def test_speedometer_format_and_auto_reset(caplog):
    acc = _acc(9, 10)
    s = cb.speedometer(32, 2)
    with caplog.at_level(logging.INFO, logger="mxfn"):
        for i in range(5):
            s(cb.batch_end_param(0, i, acc))
    msgs = [r.getMessage() for r in caplog.records if r.name == "mxfn"]
    assert len(msgs) == 2
    assert re.fullmatch(r"Epoch\[0\] Batch \[2\]\tSpeed: \d+\.\d\d samples/sec\taccuracy=0\.900000", msgs[0])
    # auto_reset cleared the local values after the first line: no instances -> nan
    assert msgs[1].startswith("Epoch[0] Batch [4]\tSpeed: ") and msgs[1].endswith("accuracy=nan")
    assert mt.get_global(acc)[1] == pytest.approx(0.9)


def test_speedometer_without_auto_reset_and_new_epoch(caplog):
    acc = _acc(3, 4)
    s = cb.speedometer(8, frequent=1, auto_reset=False)
    with caplog.at_level(logging.INFO, logger="mxfn"):
        s(cb.batch_end_param(0, 0, acc))
        s(cb.batch_end_param(0, 1, acc))
        s(cb.batch_end_param(1, 0, acc))  # new epoch: only restarts the clock
        s(cb.batch_end_param(1, 1, None))
    msgs = [r.getMessage() for r in caplog.records if r.name == "mxfn"]
    assert msgs[0].endswith("accuracy=0.750000")
    assert re.fullmatch(r"Iter\[1\] Batch \[1\]\tSpeed: \d+\.\d\d samples/sec", msgs[1])
    assert len(msgs) == 2


@pytest.mark.parametrize("bad", [dict(batch_size=0), dict(batch_size=4, frequent=0), dict(batch_size=4, bogus=1)])
def test_speedometer_bad_input(bad):
    with pytest.raises(mx.MXFNError):
        cb.speedometer(**bad)


def test_progress_bar_draws_with_tqdm():
    out = _io.StringIO()
    bar = cb.progress_bar(total=3, file=out, mininterval=0.0)
    acc = _acc(1, 2)
    for e in range(2):
        for i in range(3):
            bar(cb.batch_end_param(e, i, acc))
    text = out.getvalue()
    assert "Epoch[0]" in text and "Epoch[1]" in text and "3/3" in text and "accuracy" in text
    assert bar.bar is None  # closed after the last batch of each epoch


def test_progress_bar_without_total_closes_on_new_epoch():
    out = _io.StringIO()
    bar = cb.progress_bar({"desc": "Train"}, file=out)
    bar(cb.batch_end_param(0, 0))
    bar(cb.batch_end_param(0, 1))
    first = bar.bar
    bar(cb.batch_end_param(1, 0))
    assert first is not bar.bar
    bar.close()
    assert "Train[0]" in out.getvalue()


def test_do_checkpoint_saves_epoch_plus_one_with_period(tmp_path):
    x = mx.sym.variable("data")
    net = mx.sym.fully_connected(x, num_hidden=2, name="fc")
    args = {"fc_weight": mx.nd.ones((2, 3)), "fc_bias": mx.nd.zeros(2)}
    aux = {"bn_moving_mean": mx.nd.full((2,), 0.5)}
    prefix = str(tmp_path / "model")
    f = cb.do_checkpoint(prefix, period=2)
    for e in range(5):
        f(e, net, args, aux)
    assert sorted(os.listdir(tmp_path)) == ["model-0002.params", "model-0004.params", "model-symbol.json"]
    loaded = mx.nd.load(prefix + "-0004.params")
    assert sorted(loaded) == ["arg:fc_bias", "arg:fc_weight", "aux:bn_moving_mean"]
    np.testing.assert_array_equal(loaded["aux:bn_moving_mean"].asnumpy(), [0.5, 0.5])
    assert mx.sym.load(prefix + "-symbol.json").list_arguments() == net.list_arguments()
    assert not [p for p in os.listdir(tmp_path) if "tmp" in p]


def test_do_checkpoint_period_one_every_epoch(tmp_path):
    f = cb.do_checkpoint(str(tmp_path / "p"))
    f(0, None, {"w": np.ones(2)}, {})
    assert os.listdir(tmp_path) == ["p-0001.params"]


def test_module_checkpoint_calls_module_save_checkpoint(monkeypatch):
    import types
    calls = []
    fake = types.SimpleNamespace(save_checkpoint=lambda mod, **kw: calls.append((mod, kw)))
    monkeypatch.setattr(cb, "_module", fake)
    f = cb.module_checkpoint("MOD", "pre", period=2, save_optimizer_states=True)
    for e in range(4):
        f(e)
    assert calls == [("MOD", dict(prefix="pre", epoch=2, save_opt_states=True)),
                     ("MOD", dict(prefix="pre", epoch=4, save_opt_states=True))]


def test_log_train_metric(caplog):
    acc = _acc(1, 2)
    f = cb.log_train_metric(2, auto_reset=True)
    with caplog.at_level(logging.INFO, logger="mxfn"):
        f(cb.batch_end_param(3, 1, acc))
        f(cb.batch_end_param(3, 2, acc))
        f(cb.batch_end_param(3, 4, acc))
    msgs = [r.getMessage() for r in caplog.records if r.name == "mxfn"]
    assert msgs == ["Iter[3] Batch[2] Train-accuracy=0.500000", "Iter[3] Batch[4] Train-accuracy=nan"]


def test_callbacks_accept_mxnet_style_params(caplog):
    from collections import namedtuple
    P = namedtuple("BatchEndParam", ["epoch", "nbatch", "eval_metric", "locals"])
    acc = _acc(2, 2)
    with caplog.at_level(logging.INFO, logger="mxfn"):
        cb.log_train_metric(1)(P(0, 0, acc, {}))
    assert "Train-accuracy=1.000000" in caplog.text
