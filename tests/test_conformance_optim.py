"""The recorded MXNet 1.9.1 optimizer cases (tests/data/conformance/optim), run through
mx.optimizer's functional core: the weights after every step at each case's tolerance, the
update counts, every scheduler call the optimizer makes, the effective options, and SGLD's
noise statistics."""

import json
import warnings

import numpy as np
import pytest

from mxfn import lr_scheduler as sched
from mxfn import optimizer as opt
from mxfn import random as mxrandom
from mxfn import symbol as sym

from conftest import conformance_dir

OPTIM = conformance_dir() / "optim"
CASES = json.loads((OPTIM / "cases.json").read_text())
UPDATE_CASES = [c for c in CASES if c.get("kind") != "sgld_stats"]
SCHEDULED = [c for c in UPDATE_CASES if c.get("scheduler_calls")]
SGLD_CASES = [c for c in CASES if c.get("kind") == "sgld_stats"]
SCHEDULERS = {"FactorScheduler": sched.factor_scheduler,
              "MultiFactorScheduler": sched.multifactor_scheduler,
              "PolyScheduler": sched.poly_scheduler,
              "CosineScheduler": sched.cosine_scheduler}


class Recorder:
    """A callable scheduler that forwards to an mxfn scheduler and records each call, with
    MXNet's ``base_lr`` attribute (so an optimizer's learning rate can overwrite it)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def __call__(self, n):
        lr = self.inner(n)
        self.calls.append((n, lr))
        return lr

    @property
    def base_lr(self):
        return self.inner.base_lr

    @base_lr.setter
    def base_lr(self, v):
        self.inner.base_lr = v


def build(case, record=False):
    kw = dict(case["kwargs"])
    if case["lr_scheduler"]:
        s = SCHEDULERS[case["lr_scheduler"]["class"]](case["lr_scheduler"]["kwargs"])
        kw["lr_scheduler"] = Recorder(s) if record else s
    if case["param_idx2name"]:
        kw["param_idx2name"] = {int(k): v for k, v in case["param_idx2name"].items()}
    if case["sym_variables"]:
        kw["sym"] = sym.group([sym.variable(v["name"], {k: v[k] for k in ("lr_mult", "wd_mult") if k in v})
                               for v in case["sym_variables"]])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        o = opt.create(case["optimizer"], kw)
    # MXNet warns when the optimizer's rate (given or a class default) overwrites base_lr.
    overwritten = bool(case["lr_scheduler"]) and "learning_rate" in case["effective_kwargs"] and \
        case["effective_kwargs"]["learning_rate"] != case["lr_scheduler"]["kwargs"].get("base_lr", 0.01)
    assert [str(w.message) for w in caught if "overwritten" in str(w.message)] != [] if overwritten else \
        not caught, [str(w.message) for w in caught]
    if case["set_lr_mult"]:
        assert opt.set_lr_mult(o, case["set_lr_mult"]) is o
    if case["set_wd_mult"]:
        assert opt.set_wd_mult(o, case["set_wd_mult"]) is o
    return o, kw.get("lr_scheduler")


def run(case, o):
    data = np.load(OPTIM / f"{case['id']}.npz")
    w = {p["index"]: data[f"weight0:{p['index']}"] for p in case["params"]}
    states = {}
    for step in range(case["steps"]):
        for p in case["params"]:
            i = p["index"]
            if i not in states:  # created at the first update, from the weight at that moment
                states[i] = opt.create_state(o, i, w[i])
            grad = data[f"grad:{i}:{step}"]
            before = (w[i].copy(), grad.copy())
            new, states[i] = opt.update(o, i, w[i], grad, states[i])
            np.testing.assert_array_equal(w[i], before[0])  # inputs unchanged
            np.testing.assert_array_equal(grad, before[1])
            w[i] = new.asnumpy()
        for p in case["params"]:
            i = p["index"]
            np.testing.assert_allclose(w[i], data[f"weight:{i}:{step}"], rtol=case["rtol"],
                                       atol=case["atol"], err_msg=f"weight:{i}:{step}")
        assert opt.num_update(o) == case["num_update_after_step"][step]


@pytest.mark.parametrize("case", UPDATE_CASES, ids=[c["id"] for c in UPDATE_CASES])
def test_optimizer_case(case):
    o, _ = build(case)
    run(case, o)


@pytest.mark.parametrize("case", UPDATE_CASES, ids=[c["id"] for c in UPDATE_CASES])
def test_effective_options(case):
    o, _ = build(case)
    eff = case["effective_kwargs"]
    got = opt.options(o)
    for k, v in eff.items():
        if v is None:
            assert got[k] is None, k
        else:
            assert got[k] == pytest.approx(v), k
    if "learning_rate" not in eff:
        assert got["learning_rate"] is None


@pytest.mark.parametrize("case", SCHEDULED, ids=[c["id"] for c in SCHEDULED])
def test_scheduler_calls(case):
    o, rec = build(case, record=True)
    run(case, o)
    assert [n for n, _ in rec.calls] == [n for n, _ in case["scheduler_calls"]]
    np.testing.assert_allclose([lr for _, lr in rec.calls], [lr for _, lr in case["scheduler_calls"]],
                               rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("case", SGLD_CASES, ids=[c["id"] for c in SGLD_CASES])
def test_sgld_noise_statistics(case):
    mxrandom.seed(case["seed"])
    o, _ = build(case)
    kw = case["effective_kwargs"]
    lr, wd, r = kw["learning_rate"], kw["wd"], kw["rescale_grad"]
    shape = tuple(case["params"][0]["shape"])
    n = case["num_samples"]
    assert np.prod(shape) == n
    expected_std = case["expected_noise_std"]
    assert expected_std == pytest.approx(np.sqrt(lr))
    w = np.full(shape, case["weight0_fill"], dtype=np.float32)
    state = opt.create_state(o, 0, w)
    for s, fill in enumerate(case["grad_fills"]):
        g = np.full(shape, fill, dtype=np.float32)
        new, state = opt.update(o, 0, w, g, state)
        new = new.asnumpy().astype(np.float64)
        old = w.astype(np.float64)
        noise = new - (old - lr / 2 * (r * g + wd * old))
        assert abs(noise.std() / expected_std - 1) < 0.01, s
        assert abs(noise.mean()) < 5 * expected_std / np.sqrt(n), s
        # Same order of magnitude as MXNet's own draw.
        ref = case["expected"]["noise_stats"][s]
        assert noise.max() == pytest.approx(ref["noise_max"], rel=0.3)
        assert noise.min() == pytest.approx(ref["noise_min"], rel=0.3)
        w = new.astype(np.float32)
