"""Bad input raises MXFNError (or TypeError / FileNotFoundError) naming the problem; never a
panic, and the interpreter keeps working afterwards."""

import os

import numpy as np
import pytest

import mxfn as mx
from mxfn import nd


def _truncated(tmp_path):
    f = tmp_path / "t.params"
    nd.save(f, {"w": nd.ones((4, 4))})
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    return f


def _random_bytes(tmp_path):
    f = tmp_path / "r.params"
    f.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    return f


def _bad_magic(tmp_path):
    f = tmp_path / "m.params"
    f.write_bytes(b"\x13\x01" + b"\0" * 30)
    return f


CASES = [
    ("unknown dtype", lambda t: nd.zeros((2,), dtype="float33"), ["dtype", "float33", "float32"]),
    ("unknown dtype in array", lambda t: nd.array([1], dtype="complex64"), ["dtype", "complex64"]),
    ("mismatched shapes", lambda t: nd.ones((2, 3)) + nd.ones((4,)), ["shape", "(2, 3)", "(4,)"]),
    ("dot shapes", lambda t: nd.dot(nd.ones((2, 3)), nd.ones((2, 3))), ["dot", "inner"]),
    ("dtype mix", lambda t: nd.ones(2) + nd.ones(2, dtype="float64"), ["dtype", "float32", "float64"]),
    ("bad reshape", lambda t: nd.ones(6).reshape(4, -1), ["reshape", "6"]),
    ("bad axis", lambda t: nd.sum(nd.ones((2, 2)), axis=5), ["axis", "5"]),
    ("truncated file", lambda t: nd.load(_truncated(t)), ["t.params", "ends early"]),
    ("random bytes", lambda t: nd.load(_random_bytes(t)), ["r.params"]),
    ("bad magic", lambda t: nd.load(_bad_magic(t)), ["m.params", "magic"]),
    ("non-numeric list", lambda t: nd.array(["a", "b"]), ["numeric", "a"]),
    ("ragged list", lambda t: nd.array([[1, 2], [3]]), ["nd.array"]),
    ("gpu context", lambda t: nd.zeros(2, ctx=mx.gpu(0)), ["gpu(0)", "GPU"]),
    ("unknown option", lambda t: nd.zeros(2, dtpye="int8"), ["dtpye", "dtype"]),
    ("bad seed", lambda t: mx.random.seed(-1), ["seed", "-1"]),
    ("bad scale", lambda t: nd.random_normal(0, -1, (2,)), ["scale", "-1"]),
    ("scalar of many", lambda t: nd.to_scalar(nd.ones(3)), ["one element", "(3,)"]),
]


@pytest.mark.parametrize("name,call,words", CASES, ids=[c[0] for c in CASES])
def test_bad_input_raises_mxfnerror_naming_the_problem(tmp_path, name, call, words):
    with pytest.raises(mx.MXFNError) as e:
        call(tmp_path)
    msg = str(e.value)
    for w in words:
        assert w.lower() in msg.lower(), f"{w!r} not in {msg!r}"
    assert isinstance(e.value, ValueError)
    # the interpreter keeps working
    assert (nd.ones(2) + 1).asnumpy().tolist() == [2, 2]


def test_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        nd.load(tmp_path / "nope.params")


def test_type_errors_for_wrong_python_types(tmp_path):
    with pytest.raises(TypeError):
        nd.zeros("abc")
    with pytest.raises(TypeError):
        nd.save(tmp_path / "x", {1: nd.ones(1)})
    with pytest.raises(TypeError):
        nd.ones(2)["a"]


def test_fuzzed_files_never_crash(tmp_path):
    """Every truncation and many single-byte corruptions of a valid file fail cleanly."""
    f = tmp_path / "good.params"
    nd.save(f, {"a": nd.ones((2, 3)), "b": nd.arange(5, dtype="int64")})
    good = f.read_bytes()
    rng = np.random.default_rng(1)
    bad = tmp_path / "bad.params"
    variants = [good[:i] for i in range(len(good))]
    for _ in range(300):
        b = bytearray(good)
        b[rng.integers(len(b))] = rng.integers(256)
        variants.append(bytes(b))
    for v in variants:
        bad.write_bytes(v)
        try:
            nd.load(bad)
        except mx.MXFNError:
            pass


def test_failed_save_leaves_no_file(tmp_path):
    target = tmp_path / "missing_dir" / "x.params"
    with pytest.raises((mx.MXFNError, FileNotFoundError)):
        nd.save(target, [nd.ones(1)])
    assert not target.exists() and os.listdir(tmp_path) == []
