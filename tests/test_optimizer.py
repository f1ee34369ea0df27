"""mx.optimizer: construction and MXNet's defaults, the functional core (inputs unchanged,
counters advancing), state shapes, multipliers, schedulers, the updater, and errors."""

import inspect
import warnings

import numpy as np
import pytest
import toolz

import mxfn.lr_scheduler as sched
import mxfn.ndarray as nd
import mxfn.optimizer as opt
import mxfn.random as mxrandom
import mxfn.symbol as sym
from mxfn import MXFNError

COMMON = {"wd": 0.0, "rescale_grad": 1.0, "clip_gradient": None, "begin_num_update": 0,
          "multi_precision": False}
# MXNet 1.9.1's constructor defaults of every optimizer.
DEFAULTS = {
    "sgd": {"learning_rate": 0.01, "momentum": 0.0, "lazy_update": True},
    "nag": {"learning_rate": 0.01, "momentum": 0.0},
    "signum": {"learning_rate": 0.01, "momentum": 0.9, "wd_lh": 0.0},
    "dcasgd": {"learning_rate": 0.01, "momentum": 0.0, "lamda": 0.04},
    "sgld": {"learning_rate": 0.01},
    "adam": {"learning_rate": 0.001, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "lazy_update": True},
    "adamax": {"learning_rate": 0.002, "beta1": 0.9, "beta2": 0.999},
    "nadam": {"learning_rate": 0.001, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "schedule_decay": 0.004},
    "adagrad": {"learning_rate": 0.01, "eps": 1e-7},
    "rmsprop": {"learning_rate": 0.001, "gamma1": 0.9, "gamma2": 0.9, "epsilon": 1e-8, "centered": False,
                "clip_weights": None},
    "adadelta": {"learning_rate": 0.01, "rho": 0.9, "epsilon": 1e-5},
    "ftrl": {"learning_rate": 0.1, "lamda1": 0.01, "beta": 1.0},
}
MAKERS = {n: getattr(opt, n) for n in opt.OPTIMIZERS}
# What create_state gives for a (2, 3) weight, as MXNet's Python state objects.
STATES = {
    ("sgd", ()): None, ("sgd", (("momentum", 0.9),)): "A", ("nag", (("momentum", 0.9),)): "A",
    ("signum", ()): "A", ("signum", (("momentum", 0.0),)): None, ("dcasgd", ()): (None, "A"),
    ("dcasgd", (("momentum", 0.5),)): ("A", "A"), ("sgld", ()): None, ("adam", ()): ("A", "A"),
    ("adamax", ()): ("A", "A"), ("nadam", ()): ("A", "A"), ("adagrad", ()): "A",
    ("rmsprop", ()): ("A",), ("rmsprop", (("centered", True),)): ("A", "A", "A"),
    ("adadelta", ()): ("A", "A"), ("ftrl", ()): ("A", "A"),
}


def shape_of(state):
    if state is None:
        return None
    if isinstance(state, tuple):
        return tuple(shape_of(s) for s in state)
    assert isinstance(state, nd.NDArray) and state.shape == (2, 3) and state.dtype == np.float32
    return "A"


@pytest.mark.parametrize("name", opt.OPTIMIZERS)
def test_defaults_are_mxnets(name):
    o = MAKERS[name]()
    assert opt.options(o) == {**COMMON, **DEFAULTS[name]}
    assert opt.name(o) == name and o.name == name
    assert opt.learning_rate(o) == DEFAULTS[name]["learning_rate"]


@pytest.mark.parametrize("spelling", ["sgd", "SGD", "Sgd"])
def test_create_is_case_insensitive(spelling):
    assert opt.name(opt.create(spelling, momentum=0.9)) == "sgd"
    assert opt.create(spelling, {"learning_rate": 0.5}, learning_rate=0.2) is not None


def test_create_passes_values_through_and_names_mxnet_classes():
    o = opt.sgd()
    assert opt.create(o) is o
    assert opt.SGD is opt.sgd and opt.RMSProp is opt.rmsprop and opt.AdaGrad is opt.adagrad
    with pytest.raises(MXFNError, match="cannot be given"):
        opt.create(o, learning_rate=0.1)


@pytest.mark.parametrize("call, message", [
    (lambda: opt.create("sdg"), 'unknown optimizer "sdg"; did you mean "sgd"'),
    (lambda: opt.create("lbfgs"), "valid names are sgd, nag"),
    (lambda: opt.sgd(momentun=0.9), 'did you mean "momentum"'),
    (lambda: opt.adam(momentum=0.9), 'unknown option "momentum"'),
    (lambda: opt.sgd(learning_rate=float("nan")), "learning_rate"),
    (lambda: opt.sgd(learning_rate=-0.1), "learning_rate"),
    (lambda: opt.adam(learning_rate=-1e-3), "learning_rate"),
    (lambda: opt.sgd(momentum=-0.9), "momentum"),
    (lambda: opt.nag(momentum=1.0), "momentum"),
    (lambda: opt.adam(beta1=1.0), "beta1"),
    (lambda: opt.adam(beta2=-0.1), "beta2"),
    (lambda: opt.nadam(beta1=2.0), "beta1"),
    (lambda: opt.adamax(beta2=1.5), "beta2"),
    (lambda: opt.rmsprop(gamma1=1.0), "gamma1"),
    (lambda: opt.rmsprop(clip_weights=-1.0), "clip_weights"),
    (lambda: opt.adadelta(rho=-0.1), "rho"),
    (lambda: opt.adadelta(epsilon=0.0), "epsilon"),
    (lambda: opt.sgd(wd=float("inf")), "wd"),
    (lambda: opt.sgd(clip_gradient=-1.0), "clip_gradient"),
    (lambda: opt.sgd(rescale_grad=float("nan")), "rescale_grad"),
    (lambda: opt.sgd(begin_num_update=-1), "begin_num_update"),
    (lambda: opt.signum(momentum=0.0, wd_lh=0.1), "wd_lh"),
    (lambda: opt.ftrl(learning_rate=0.0), "learning_rate"),
    (lambda: opt.sgd(lr_mult={"w": -1.0}), "lr_mult"),
], ids=lambda x: x if isinstance(x, str) else "")
def test_nonsense_raises_at_creation(call, message):
    with pytest.raises(MXFNError, match=message) as e:
        call()
    assert str(e.value).startswith("optimizer.")


@pytest.mark.parametrize("call", [
    lambda: opt.sgd(learning_rate="0.1"),
    lambda: opt.sgd(momentum=True),
    lambda: opt.sgd(lr_scheduler=3),
    lambda: opt.sgd(param_idx2name={"0": "w"}),
    lambda: opt.sgd(lr_mult={"w": "2"}),
    lambda: opt.sgd(sym=42),
    lambda: opt.create(3),
    lambda: opt.update("sgd", 0, [1.0], [1.0], None),
    lambda: opt.update(opt.sgd(), 1.5, [1.0], [1.0], None),
    lambda: opt.update(opt.sgd(), 0, [1.0], [1.0], "state"),
])
def test_wrong_types_raise_type_error(call):
    with pytest.raises(TypeError):
        call()


@pytest.mark.parametrize("key", list(STATES), ids=lambda k: k[0] + "".join(f"-{a}={b}" for a, b in k[1]))
def test_state_shapes_mirror_mxnet(key):
    name, params = key
    o = MAKERS[name](dict(params))
    st = opt.create_state(o, 0, np.ones((2, 3), np.float32))
    assert shape_of(st) == STATES[key]


def test_dcasgd_previous_weight_starts_as_the_weight():
    w = nd.array([[1.0, 2.0, 3.0]])
    _, prev = opt.create_state(opt.dcasgd(), 0, w)
    np.testing.assert_array_equal(prev.asnumpy(), w.asnumpy())


def arrays(state):
    """The arrays of a state, in order, as numpy copies."""
    if isinstance(state, tuple):
        return [a for s in state for a in arrays(s)]
    return [] if state is None else [state.asnumpy()]


@pytest.mark.parametrize("name", opt.OPTIMIZERS)
def test_update_leaves_inputs_unchanged(name):
    o = MAKERS[name]()
    w = nd.array([[0.5, -1.0, 2.0], [0.1, 0.2, -0.3]])
    g = nd.array([[0.3, 0.1, -0.2], [1.0, -1.0, 0.5]])
    w_view, g_np = np.asarray(w), g.asnumpy()
    st = opt.create_state(o, 7, w)
    st_before = arrays(st)
    w2, st2 = opt.update(o, 7, w, g, st)
    np.testing.assert_array_equal(w.asnumpy(), w_view)
    np.testing.assert_array_equal(g.asnumpy(), g_np)
    for a, b in zip(arrays(st), st_before, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(w2.asnumpy(), w_view)
    assert shape_of(st2) == shape_of(st)
    assert opt.update_count(o, 7) == 1 and opt.num_update(o) == 1


def test_counts_are_per_index_and_start_at_begin_num_update():
    o = opt.adam(begin_num_update=10)
    states = {i: opt.create_state(o, i, [1.0]) for i in (0, 1)}
    for i in (0, 0, 1):
        _, states[i] = opt.update(o, i, [1.0], [0.1], states[i])
    assert (opt.update_count(o, 0), opt.update_count(o, 1), opt.update_count(o, 2)) == (12, 11, None)
    assert opt.num_update(o) == 12


def test_numpy_and_list_inputs_become_float32_and_ndarray_dtypes_are_kept():
    o = opt.sgd(learning_rate=0.5)
    w, _ = opt.update(o, 0, np.array([1.0, 2.0]), [1, 1], None)  # float64 numpy, int list
    assert w.dtype == np.float32
    np.testing.assert_allclose(w.asnumpy(), [0.5, 1.5])
    w64, _ = opt.update(o, 0, nd.array([1.0], dtype="float64"), [1.0], None)
    assert w64.dtype == np.float64 and w64.asnumpy()[0] == 0.5
    with pytest.raises(MXFNError, match="weight of index 0: expected a float16, float32 or float64 array, got int32"):
        opt.update(o, 0, nd.array([1], dtype="int32"), [1.0], None)
    with pytest.raises(MXFNError, match="grad of index 0"):
        opt.update(o, 0, [1.0, 2.0], [1.0], None)
    with pytest.raises(MXFNError, match=r"state of index 3: expected the state create_state gives"):
        opt.update(opt.adam(), 3, [1.0], [1.0], None)
    with pytest.raises(MXFNError, match="index must be >= 0"):
        opt.update(o, -1, [1.0], [1.0], None)
    assert opt.num_update(o) == 2  # failed updates count nothing


def test_multipliers_follow_mxnet_layering():
    names = {0: "fc1_weight", 1: "fc1_bias", 2: "bn_gamma", 3: "bn_beta"}
    s = sym.group([sym.variable("fc1_weight", lr_mult=2.0), sym.variable("fc1_bias", wd_mult=1.0),
                   sym.variable("bn_gamma"), sym.variable("bn_beta")])
    o = opt.sgd(learning_rate=0.1, wd=0.1, param_idx2name=names, sym=s)
    assert opt.lr_mult(o) == {"fc1_weight": 2.0}
    assert opt.wd_mult(o) == {"fc1_bias": 1.0, "bn_beta": 0.0}
    # The attr dict works in place of the symbol; the lr_mult/wd_mult options go over it.
    o2 = opt.sgd(param_idx2name=names, sym=s.attr_dict(), lr_mult={"fc1_weight": 3.0})
    assert opt.lr_mult(o2) == {"fc1_weight": 3.0}
    # Each set_* call rebuilds from the defaults: an earlier call's entries are dropped.
    o = toolz.thread_first(o, (opt.set_lr_mult, {"bn_gamma": 0.0}), (opt.set_wd_mult, {"bn_gamma": 0.5}))
    assert opt.lr_mult(o) == {"fc1_weight": 2.0, "bn_gamma": 0.0}
    assert opt.set_lr_mult(o, {"bn_beta": 0.5}) is o
    assert opt.lr_mult(o) == {"fc1_weight": 2.0, "bn_beta": 0.5}
    assert opt.wd_mult(o)["bn_gamma"] == 0.5
    # lr_mult 0 freezes a parameter; wd_mult 0 (a bias) means no decay.
    o = opt.set_lr_mult(o, {"bn_gamma": 0.0})
    w, _ = opt.update(o, 2, [1.0], [1.0], None)
    assert w.asnumpy().tolist() == [1.0]
    w, _ = opt.update(o, 3, [1.0], [0.0], None)
    assert w.asnumpy().tolist() == [1.0]
    w, _ = opt.update(o, 0, [1.0], [0.0], None)  # weight: decayed with lr 0.2
    assert w.asnumpy().tolist() == pytest.approx([1 - 0.2 * 0.1])


def test_set_idx2name_applies_the_weight_decay_rule():
    o = opt.sgd(wd=0.1)
    assert opt.wd_mult(o) == {}
    o = opt.set_idx2name(opt.set_wd_mult(o, {"fc_weight": 2.0}), {0: "fc_weight", 1: "fc_bias"})
    assert opt.idx2name(o) == {0: "fc_weight", 1: "fc_bias"}
    assert opt.wd_mult(o) == {"fc_weight": 2.0, "fc_bias": 0.0}


def test_scheduler_state_is_shared_and_base_lr_overwritten():
    s = sched.factor_scheduler(2, 0.5, base_lr=0.4)
    o = opt.sgd(lr_scheduler=s, momentum=0.9)
    assert opt.lr_scheduler(o) is s
    st = opt.create_state(o, 0, [1.0])
    for _ in range(5):
        _, st = opt.update(o, 0, [1.0], [1.0], st)
    assert s.base_lr == pytest.approx(0.1)  # decayed by the optimizer's calls
    with pytest.raises(MXFNError, match="lr_scheduler"):
        opt.set_learning_rate(o, 0.1)
    with pytest.warns(UserWarning, match="overwritten"):
        opt.adam(lr_scheduler=s)
    assert s.base_lr == 0.001
    s2 = sched.factor_scheduler(2, 0.5, base_lr=0.4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt.ftrl(learning_rate=0.3, lr_scheduler=s2)  # Ftrl never overwrites
        opt.sgd(lr_scheduler=s2)  # SGD without a rate keeps the scheduler's
    assert s2.base_lr == 0.4
    assert opt.options(opt.sgd(lr_scheduler=s2))["learning_rate"] is None


def test_a_python_callable_can_schedule():
    calls = []

    def halve_every_two(n):
        calls.append(n)
        return 0.1 * 0.5 ** ((n - 1) // 2)

    o = opt.sgd(lr_scheduler=halve_every_two)
    w = np.array([1.0], np.float32)
    for _ in range(3):
        w, _ = opt.update(o, 0, w, [1.0], None)
    assert calls == [1, 2, 3]
    np.testing.assert_allclose(np.asarray(w), [1 - 0.1 - 0.1 - 0.05], rtol=1e-6)

    def broken(n):
        raise RuntimeError("boom")

    with pytest.raises(MXFNError, match="lr_scheduler.*boom"):
        opt.update(opt.sgd(lr_scheduler=broken), 0, [1.0], [1.0], None)


def test_adadelta_never_asks_for_a_learning_rate():
    s = sched.factor_scheduler(1, 0.5, base_lr=0.4)
    o = opt.adadelta(lr_scheduler=s)
    st = opt.create_state(o, 0, [1.0])
    for _ in range(4):
        _, st = opt.update(o, 0, [1.0], [1.0], st)
    assert s.base_lr == 0.4


def test_setters_return_the_optimizer():
    o = opt.sgd()
    assert opt.set_learning_rate(o, 0.3) is o and opt.learning_rate(o) == 0.3
    assert opt.set_rescale_grad(o, 0.125) is o and opt.options(o)["rescale_grad"] == 0.125
    with pytest.raises(MXFNError, match="learning_rate"):
        opt.set_learning_rate(o, float("nan"))
    with pytest.raises(MXFNError, match="rescale_grad"):
        opt.set_rescale_grad(o, -1.0)


def test_clip_gradient_zero_means_off_only_for_the_fused_kernels():
    # MXNet: SGD/NAG/Adam/RMSProp/Ftrl/Signum pass clip_gradient only when truthy; the
    # others clip whenever it is not None (0 zeroes the gradient).
    w, _ = opt.update(opt.sgd(learning_rate=1.0, clip_gradient=0.0), 0, [1.0], [0.5], None)
    assert w.asnumpy().tolist() == [0.5]
    o = opt.adagrad(learning_rate=1.0, clip_gradient=0.0)
    w, _ = opt.update(o, 0, [1.0], [0.5], opt.create_state(o, 0, [1.0]))
    assert w.asnumpy().tolist() == [1.0]


def test_rescale_comes_before_clip():
    w, _ = opt.update(opt.sgd(learning_rate=1.0, rescale_grad=0.5, clip_gradient=1.0), 0, [0.0], [3.0], None)
    assert w.asnumpy().tolist() == [-1.0]  # clip(0.5*3) = 1, not 0.5*clip(3) = 0.5


def test_nadam_m_schedule_is_one_number_per_optimizer():
    one, two = opt.nadam(learning_rate=0.01), opt.nadam(learning_rate=0.01)
    s1 = opt.create_state(one, 0, [1.0])
    s2 = opt.create_state(two, 0, [1.0])
    opt.update(two, 1, [5.0], [1.0], opt.create_state(two, 1, [5.0]))  # advances m_schedule
    w1, _ = opt.update(one, 0, [1.0], [0.3], s1)
    w2, _ = opt.update(two, 0, [1.0], [0.3], s2)
    assert w1.asnumpy()[0] != w2.asnumpy()[0]


def test_sgld_noise_follows_the_global_seed():
    def run():
        mxrandom.seed(3)
        w, _ = opt.update(opt.sgld(learning_rate=0.04), 0, np.zeros(5000, np.float32),
                          np.zeros(5000, np.float32), None)
        return w.asnumpy()
    a = run()
    np.testing.assert_array_equal(a, run())
    assert abs(a.std() - 0.2) < 0.01


def test_get_updater_updates_ndarrays_in_place_like_mxnet():
    u = opt.get_updater(opt.sgd(learning_rate=0.1, momentum=0.9))
    w = nd.array([1.0, 2.0])
    view = np.asarray(w)
    new = u(0, nd.array([1.0, 1.0]), w)
    np.testing.assert_allclose(w.asnumpy(), [0.9, 1.9], rtol=1e-6)
    np.testing.assert_array_equal(view, [1.0, 2.0])  # earlier views never change
    assert new.asnumpy().tolist() == w.asnumpy().tolist()
    u(0, nd.array([1.0, 1.0]), w)
    np.testing.assert_allclose(w.asnumpy(), [0.9 - 0.19, 1.9 - 0.19], rtol=1e-6)
    assert set(u.states) == {0}
    raw = np.array([1.0, 2.0], np.float32)
    u(1, [1.0, 1.0], raw)
    assert raw.tolist() == [1.0, 2.0]  # numpy weights are never written


def test_big_arrays_update_like_small_ones():
    rng = np.random.default_rng(0)
    w = rng.standard_normal(200_001).astype(np.float32)
    g = rng.standard_normal(200_001).astype(np.float32)
    big, _ = opt.update(opt.rmsprop(centered=True, wd=0.01), 0, w, g,
                        opt.create_state(opt.rmsprop(centered=True), 0, w))
    o = opt.rmsprop(centered=True, wd=0.01)
    small, _ = opt.update(o, 0, w[-5:], g[-5:], opt.create_state(o, 0, w[-5:]))
    np.testing.assert_array_equal(big.asnumpy()[-5:], small.asnumpy())


def test_repr():
    assert repr(opt.sgd(momentum=0.9, lr_scheduler=sched.factor_scheduler(5))).startswith(
        "Optimizer(sgd, learning_rate=None, wd=0.0, rescale_grad=1.0, clip_gradient=None, momentum=0.9")


@pytest.mark.parametrize("name", opt.OPTIMIZERS)
def test_every_option_is_documented(name):
    doc = inspect.getdoc(MAKERS[name])
    spec = getattr(opt, f"{name.upper()}_OPTS")
    for key in spec:
        assert f"    {key} (" in doc, key
    assert "Example:" in doc and "Returns:" in doc
