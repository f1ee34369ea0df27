"""mx.lr_scheduler: the four schedulers, their call forms, MXNet's statefulness, base_lr,
and the errors for nonsense options."""

import inspect

import pytest

import mxfn.lr_scheduler as sched
from mxfn import MXFNError

BUILDERS = [sched.factor_scheduler, sched.multifactor_scheduler, sched.poly_scheduler,
            sched.cosine_scheduler]
SPECS = {sched.factor_scheduler: sched.FACTOR_SCHEDULER_OPTS,
         sched.multifactor_scheduler: sched.MULTIFACTOR_SCHEDULER_OPTS,
         sched.poly_scheduler: sched.POLY_SCHEDULER_OPTS,
         sched.cosine_scheduler: sched.COSINE_SCHEDULER_OPTS}


@pytest.mark.parametrize("make", [
    lambda: sched.factor_scheduler(10, 0.5, {"base_lr": 0.1}),
    lambda: sched.factor_scheduler(10, 0.5, base_lr=0.1),
    lambda: sched.factor_scheduler({"step": 10, "factor": 0.5, "base_lr": 0.1}),
    lambda: sched.factor_scheduler(step=10, factor=0.5, base_lr=0.1),
    lambda: sched.factor_scheduler(10, {"factor": 0.5, "base-lr": 0.1}),
    lambda: sched.FactorScheduler(step=10, factor=0.5, baseLr=0.1),
], ids=["positional", "keywords", "map", "all-keywords", "map-in-factor-slot", "mxnet-name"])
def test_call_forms_agree(make):
    s = make()
    assert [s(n) for n in (1, 10, 11, 20, 21)] == [0.1, 0.1, 0.05, 0.05, 0.025]


@pytest.mark.parametrize("make, queries, expected", [
    # Factor: repeated multiplication, drops at step+1, never recovers.
    (lambda: sched.factor_scheduler(10, 0.5, base_lr=0.1), [0, 35, 10, 70, 5], [0.1, 0.0125, 0.0125, 0.0015625, 0.0015625]),
    (lambda: sched.factor_scheduler(5, 0.1, base_lr=1.0, stop_factor_lr=1e-3), [100], [1e-3]),
    # MultiFactor: each step passed once, strictly greater.
    (lambda: sched.multifactor_scheduler([10, 20, 30], 0.5, base_lr=0.1), [25, 5, 31, 0], [0.025, 0.025, 0.0125, 0.0125]),
    # Poly / Cosine: the last value computed for n <= max_update is returned beyond it.
    (lambda: sched.poly_scheduler(50, base_lr=0.1, final_lr=0.01), [200, 10, 300, 50, 400, 25],
     [0.1, 0.0676, 0.0676, 0.01, 0.01, 0.0325]),
    (lambda: sched.cosine_scheduler(40, base_lr=0.1, warmup_steps=5, warmup_begin_lr=0.01), [100, 2, 41],
     [0.1, 0.046, 0.1]),
    # Warmup.
    (lambda: sched.factor_scheduler(20, 0.7, base_lr=0.2, warmup_steps=10, warmup_begin_lr=0.01,
                                    warmup_mode="constant"), [0, 9, 10, 21], [0.01, 0.01, 0.2, 0.14]),
], ids=["factor", "factor-floor", "multifactor", "poly", "cosine", "warmup-constant"])
def test_stateful_like_mxnet(make, queries, expected):
    s = make()
    assert [s(n) for n in queries] == pytest.approx(expected, rel=1e-12)


def test_base_lr_reads_and_sets_like_mxnet():
    s = sched.factor_scheduler(1, 0.5, base_lr=1.0)
    assert s.base_lr == 1.0 and sched.base_lr(s) == 1.0
    s(3)
    assert s.base_lr == 0.25
    s.base_lr = 0.8
    assert s(3) == 0.8
    # Warmup still ends at the constructor's base_lr (MXNet's warmup_final_lr).
    w = sched.poly_scheduler(10, base_lr=0.5, warmup_steps=4, warmup_begin_lr=0.1, pwr=1)
    w.base_lr = 2.0
    assert w(2) == pytest.approx(0.3)
    assert w(7) == pytest.approx(0.25)  # Poly decays from the constructor's base_lr too
    with pytest.raises(MXFNError, match="base_lr"):
        s.base_lr = -1.0


def test_huge_update_counts_do_not_hang():
    s = sched.factor_scheduler(1, 1.0)
    assert s(2**62) == 0.01
    s = sched.factor_scheduler(1, 0.5, base_lr=1.0)
    assert s(2**62) == 1e-8


@pytest.mark.parametrize("call, message", [
    (lambda: sched.factor_scheduler(0), "step"),
    (lambda: sched.factor_scheduler(5, 1.5), "factor"),
    (lambda: sched.factor_scheduler(5, -0.5), "factor"),
    (lambda: sched.factor_scheduler(-5), "step"),
    (lambda: sched.factor_scheduler(5, base_lr=float("nan")), "base_lr"),
    (lambda: sched.factor_scheduler(5, base_lr=0.1, warmup_begin_lr=0.5, warmup_steps=3), "warmup_begin_lr"),
    (lambda: sched.factor_scheduler(5, warmup_mode="cubic"), "warmup_mode"),
    (lambda: sched.factor_scheduler(5, warmup_steps=-1), "warmup_steps"),
    (lambda: sched.multifactor_scheduler([5, 5]), "step"),
    (lambda: sched.multifactor_scheduler([]), "step"),
    (lambda: sched.multifactor_scheduler([0, 3]), "step"),
    (lambda: sched.poly_scheduler(0), "max_update"),
    (lambda: sched.cosine_scheduler(10, warmup_steps=10), "warmup_steps"),
    (lambda: sched.poly_scheduler(10, final_lr=-1.0), "final_lr"),
    (lambda: sched.factor_scheduler(), 'missing required option "step"'),
    (lambda: sched.factor_scheduler(5, stepp=3), 'did you mean "step"'),
    (lambda: sched.factor_scheduler(5, step=3), "given twice"),
], ids=lambda x: x if isinstance(x, str) else "")
def test_nonsense_raises(call, message):
    with pytest.raises(MXFNError, match=message) as e:
        call()
    assert str(e.value).startswith("lr_scheduler.")


@pytest.mark.parametrize("call", [
    lambda: sched.factor_scheduler(2.5),
    lambda: sched.multifactor_scheduler([1, 2.5]),
    lambda: sched.poly_scheduler(10, base_lr="0.1"),
    lambda: sched.factor_scheduler(5)(1.5),
    lambda: sched.factor_scheduler(5)(True),
])
def test_wrong_types_raise_type_error(call):
    with pytest.raises(TypeError):
        call()


def test_negative_num_update():
    with pytest.raises(MXFNError, match="num_update"):
        sched.factor_scheduler(5)(-1)


def test_repr_shows_the_options():
    r = repr(sched.multifactor_scheduler([2, 4], 0.5))
    assert r.startswith("MultiFactorScheduler(step=[2, 4], factor=0.5, base_lr=0.01")


@pytest.mark.parametrize("make", BUILDERS, ids=lambda f: f.__name__)
def test_every_option_is_documented(make):
    doc = inspect.getdoc(make)
    for key in SPECS[make]:
        assert f"    {key} (" in doc, key
    assert "Example:" in doc and "Returns:" in doc
