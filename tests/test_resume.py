"""Resume that resumes (issue #15 item 6): ``fit`` from a checkpoint with ``begin_epoch > 0``
must continue the optimizer's update count, so a learning-rate schedule continues where it
was instead of starting over (MXNet 1.9.1's bug: its ``Module.fit`` restarts the count).

Each test trains the same small net twice from the same seed: once for 3 epochs in one
``fit``, once for 2 epochs, then a checkpoint with optimizer states, ``load_checkpoint`` and
a ``fit`` with ``begin_epoch=2`` — what a user does after a crash, in a new process, with a
fresh scheduler. The third epoch must see the same learning rates and update counts, and
end with the same weights.
"""

import logging

import numpy as np
import pytest

import mxfn as mx
from mxfn import module as m

BATCH, SAMPLES = 5, 20  # 4 batches, so 4 updates, per epoch
BATCHES_PER_EPOCH = SAMPLES // BATCH
SEED = 7


def _net():
    fc = mx.sym.fully_connected(mx.sym.variable("data"), num_hidden=3, name="fc")
    return mx.sym.softmax_output(fc, name="softmax")


def _train_iter():
    rng = np.random.RandomState(0)
    x = rng.normal(size=(SAMPLES, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("float32") + (x[:, 1] > 0)
    return mx.io.ndarray_iter(x, label=y, batch_size=BATCH)


def _opt_params(**extra):
    # A fresh scheduler each time, as a new process would make: the rate halves every
    # 3 updates, so its value tells exactly which update the optimizer thinks it is at.
    sched = mx.lr_scheduler.factor_scheduler(3, 0.5, base_lr=1.0)
    return {"learning_rate": 1.0, "momentum": 0.9, "lr_scheduler": sched, **extra}


def _fit(mod, train, begin_epoch, num_epoch, opt_params):
    """Fits and returns [(epoch, nbatch, learning rate, num_update)] after every batch."""
    seen = []

    def record(param):
        opt = m.optimizer(param.locals["self"])
        seen.append((param.epoch, param.nbatch, mx.optimizer.learning_rate(opt),
                     mx.optimizer.num_update(opt)))

    m.fit(mod, train, num_epoch=num_epoch, begin_epoch=begin_epoch, optimizer="sgd",
          optimizer_params=opt_params, initializer=mx.init.xavier(), batch_end_callback=record)
    return seen


def _uninterrupted():
    mx.random.seed(SEED)
    mod = m.module(_net())
    seen = _fit(mod, _train_iter(), 0, 3, _opt_params())
    return seen, m.get_params(mod)[0]


def _resumed(tmp_path, **extra):
    mx.random.seed(SEED)
    first = m.module(_net())
    before = _fit(first, _train_iter(), 0, 2, _opt_params())
    prefix = str(tmp_path / "ckpt")
    m.save_checkpoint(first, prefix=prefix, epoch=2, save_opt_states=True)
    mod = m.load_checkpoint(prefix, 2, {"load_optimizer_states": True})
    after = _fit(mod, _train_iter(), 2, 3, _opt_params(**extra))
    return before + after, m.get_params(mod)[0]


def _epoch(seen, e):
    return [s for s in seen if s[0] == e]


def test_the_uninterrupted_run_is_what_the_schedule_says():
    # Rates and counts of the reference run, by hand: update n uses 1.0 * 0.5**((n - 1) // 3).
    seen, _ = _uninterrupted()
    assert [s[3] for s in seen] == list(range(1, 13))
    assert [s[2] for s in seen] == [0.5 ** ((n - 1) // 3) for n in range(1, 13)]


def test_fit_with_begin_epoch_continues_the_update_count_and_the_schedule(tmp_path):
    ref, ref_params = _uninterrupted()
    seen, params = _resumed(tmp_path)
    assert _epoch(seen, 2) == _epoch(ref, 2)
    for name, w in ref_params.items():
        np.testing.assert_allclose(params[name].asnumpy(), w.asnumpy(), rtol=1e-5, atol=1e-6)


def test_resuming_with_begin_num_update_matches_the_uninterrupted_run(tmp_path):
    # Telling the optimizer how many updates ran gives the same: the resumed epoch is exactly
    # the uninterrupted one — rates, counts and weights (the optimizer states came back from
    # the .states file too).
    ref, ref_params = _uninterrupted()
    seen, params = _resumed(tmp_path, begin_num_update=2 * BATCHES_PER_EPOCH)
    assert _epoch(seen, 2) == _epoch(ref, 2)
    assert _epoch(seen, 2)[0][2:] == (0.25, 9)  # update 9: halved twice (after 3 and 6)
    for name, w in ref_params.items():
        np.testing.assert_allclose(params[name].asnumpy(), w.asnumpy(), rtol=1e-5, atol=1e-6)


def test_an_explicit_begin_num_update_wins(tmp_path):
    # The user's count is taken as given: 0 restarts the schedule at update 1 (MXNet's
    # behaviour, on request), which also shows the comparison above can fail.
    seen, _ = _resumed(tmp_path, begin_num_update=0)
    assert _epoch(seen, 2)[0][2:] == (1.0, 1)


def test_the_mxfn_logger_is_silent_unless_the_application_configures_logging():
    # A library adds only a NullHandler to its logger (the logging HOWTO's rule): without
    # one, Python's last-resort handler prints mxfn's warnings to stderr in applications
    # that never configured logging.
    handlers = logging.getLogger("mxfn").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)
