"""Tests for mxfn.context: Context values, the per-thread default, as_context and device codes."""

import dataclasses
import pickle
import threading

import pytest

from mxfn._errors import MXFNError
from mxfn.context import (Context, as_context, cpu, current_context, default_context,
                          dev_type_code, gpu, num_gpus)


@pytest.mark.parametrize("ctx, text, device_type, device_id", [
    (cpu(), "cpu(0)", "cpu", 0),
    (cpu(1), "cpu(1)", "cpu", 1),
    (cpu(device_id=3), "cpu(3)", "cpu", 3),
    (gpu(), "gpu(0)", "gpu", 0),
    (gpu(2), "gpu(2)", "gpu", 2),
    (Context("cpu"), "cpu(0)", "cpu", 0),
    (Context("gpu", 5), "gpu(5)", "gpu", 5),
])
def test_fields_and_repr(ctx, text, device_type, device_id):
    assert (repr(ctx), str(ctx)) == (text, text)
    assert (ctx.device_type, ctx.device_id) == (device_type, device_id)


@pytest.mark.parametrize("a, b, equal", [
    (cpu(), cpu(0), True),
    (cpu(1), Context("cpu", 1), True),
    (gpu(0), gpu(), True),
    (cpu(0), cpu(1), False),
    (cpu(0), gpu(0), False),
    (cpu(0), "cpu(0)", False),
])
def test_equality_and_hash(a, b, equal):
    assert (a == b) is equal
    assert (a != b) is not equal
    if equal:
        assert hash(a) == hash(b)


def test_usable_as_keys():
    assert {cpu(0): "a", cpu(0 + 0): "b", gpu(0): "c"} == {cpu(): "b", gpu(): "c"}
    assert len({cpu(0), cpu(), cpu(1), gpu(1)}) == 3


def test_immutable():
    ctx = cpu(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.device_id = 2
    assert ctx == cpu(1)


def test_pickle():
    assert pickle.loads(pickle.dumps(gpu(3))) == gpu(3)


def test_numpy_device_id_becomes_int():
    np = pytest.importorskip("numpy")
    ctx = cpu(np.int64(2))
    assert type(ctx.device_id) is int and ctx == cpu(2)


@pytest.mark.parametrize("make, fname", [
    (cpu, "context.cpu"),
    (gpu, "context.gpu"),
    (lambda i: Context("cpu", i), "context.Context"),
])
@pytest.mark.parametrize("bad", [-1, 1.5, "0", True, None])
def test_bad_device_id(make, fname, bad):
    with pytest.raises(MXFNError) as err:
        make(bad)
    assert str(err.value) == (f"{fname}: device_id must be a non-negative int, "
                              f"got {type(bad).__name__} {bad!r}")


@pytest.mark.parametrize("bad", ["tpu", "CPU", 1, None, ["cpu"]])
def test_bad_device_type(bad):
    with pytest.raises(MXFNError, match='context.Context: device_type must be "cpu" or "gpu"'):
        Context(bad, 0)


def test_default_is_cpu0():
    assert current_context() == cpu(0)
    assert default_context() == cpu(0)


def test_with_block_sets_and_restores_default():
    with gpu(1) as ctx:
        assert ctx == gpu(1)
        assert current_context() == gpu(1) and default_context() == gpu(1)
        with cpu(2):
            assert current_context() == cpu(2)
            with cpu(2):
                assert current_context() == cpu(2)
            assert current_context() == cpu(2)
        assert current_context() == gpu(1)
    assert current_context() == cpu(0)


def test_with_block_restores_on_exception():
    with pytest.raises(RuntimeError):
        with cpu(3):
            raise RuntimeError("boom")
    assert current_context() == cpu(0)


def _in_thread(f):
    """Run f in a new thread and return its result."""
    out = []
    t = threading.Thread(target=lambda: out.append(f()))
    t.start()
    t.join()
    return out[0]


def test_default_is_per_thread():
    with gpu(1):
        assert _in_thread(current_context) == cpu(0)

    def enter_and_report():
        with cpu(7):
            return current_context()

    assert _in_thread(enter_and_report) == cpu(7)
    assert current_context() == cpu(0)


def test_num_gpus():
    assert num_gpus() == 0


@pytest.mark.parametrize("given, expected", [
    (cpu(4), cpu(4)),
    (gpu(1), gpu(1)),
    ("cpu", cpu(0)),
    ("gpu", gpu(0)),
    ("cpu(1)", cpu(1)),
    ("gpu(0)", gpu(0)),
    ("gpu(12)", gpu(12)),
    (" cpu( 2 ) ", cpu(2)),
    (None, cpu(0)),
])
def test_as_context(given, expected):
    assert as_context(given) == expected


def test_as_context_returns_a_context_as_is():
    ctx = cpu(1)
    assert as_context(ctx) is ctx


def test_as_context_none_follows_with_block():
    with gpu(2):
        assert as_context(None) == gpu(2)


@pytest.mark.parametrize("bad", ["tpu", "cpu(-1)", "cpu(a)", "cpu1", "", "cpu()", 0, ["cpu"]])
def test_as_context_rejects(bad):
    with pytest.raises(MXFNError) as err:
        as_context(bad)
    assert str(err.value) == ('context.as_context: expected a Context, "cpu", "cpu(i)", "gpu(i)" '
                              f"or None, got {type(bad).__name__} {bad!r}")


def test_as_context_names_the_caller():
    with pytest.raises(MXFNError, match=r"^module\.module: expected a Context"):
        as_context("tpu", "module.module")


@pytest.mark.parametrize("ctx, code", [(cpu(0), 1), (cpu(3), 1), (gpu(0), 2), (gpu(1), 2),
                                       ("gpu(1)", 2)])
def test_dev_type_code(ctx, code):
    assert dev_type_code(ctx) == code


def test_dev_type_code_rejects():
    with pytest.raises(MXFNError, match=r"^context\.dev_type_code: expected a Context"):
        dev_type_code(3)
