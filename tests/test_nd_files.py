"""MXNet's NDArray-list files: the conformance files load exactly, save back byte for byte,
and MXNet 1.9.1 reads what mxfn writes (and the other way round)."""

import json

import numpy as np
import pytest

from mxfn import nd

from conftest import conformance_dir

CK = conformance_dir() / "checkpoints"
REQUIRED = ["ndlist", "nddict", "ndempty"]
OPTIONAL_SUPPORTED = ["ndlegacy"]


def _expected(name):
    meta = json.loads((CK / f"{name}.json").read_text())
    exp = np.load(CK / f"{name}-expected.npz") if (CK / f"{name}-expected.npz").exists() else {}
    return meta, exp


@pytest.mark.parametrize("name", REQUIRED + OPTIONAL_SUPPORTED)
def test_load_reproduces_arrays_bit_for_bit(name):
    meta, exp = _expected(name)
    got = nd.load(CK / f"{name}.params")
    assert isinstance(got, dict) == (meta["kind"] == "dict")
    keys = [e["key"] for e in meta["entries"]]
    if isinstance(got, dict):
        assert list(got) == keys
        items = [got[k] for k in keys]
    else:
        assert len(got) == len(keys)
        items = got
    for e, arr in zip(meta["entries"], items):
        want = exp[e["key"]]
        assert arr.dtype == np.dtype(e["dtype"]) == want.dtype
        assert arr.shape == tuple(e["shape"]) == want.shape
        assert arr.asnumpy().tobytes() == want.tobytes()  # bits: NaN payloads and -0.0 too


@pytest.mark.parametrize("name", REQUIRED)
def test_save_of_loaded_gives_mxnet_bytes(tmp_path, name):
    out = tmp_path / f"{name}.params"
    nd.save(out, nd.load(CK / f"{name}.params"))
    assert out.read_bytes() == (CK / f"{name}.params").read_bytes()


@pytest.mark.parametrize("prefix", ["mlp-0001", "lenet-0002", "bnnet-0003", "legacy_v0800-0000", "legacy_v0903-0000"])
def test_checkpoint_params_round_trip(tmp_path, prefix):
    src = CK / f"{prefix}.params"
    d = nd.load(src)
    assert all(k.split(":", 1)[0] in ("arg", "aux") for k in d)
    nd.save(tmp_path / "x.params", d)
    assert (tmp_path / "x.params").read_bytes() == src.read_bytes()


def test_unsupported_optional_files_fail_clearly():
    import mxfn as mx
    with pytest.raises(mx.MXFNError, match="sparse"):
        nd.load(CK / "ndsparse.params")


ARRAYS = {
    "f32": np.array([[1.5, -0.0, np.nan], [np.inf, -np.inf, 3e-39]], np.float32),
    "f64": np.array([1e300, -2.5], np.float64),
    "f16": np.array([[65504, 6e-8]], np.float16),
    "u8": np.array([0, 255, 7], np.uint8),
    "i8": np.array([-128, 127], np.int8),
    "i32": np.arange(6, dtype=np.int32).reshape(2, 3),
    "i64": np.array([2**40, -3], np.int64),
    "empty": np.zeros((0, 3), np.float32),
    "größe": np.ones((1, 1, 2, 2), np.float32),
}


def test_mxnet_reads_what_mxfn_writes(tmp_path, mxnet_python):
    f, g = tmp_path / "d.params", tmp_path / "l.params"
    nd.save(f, {k: nd.array(v, dtype=v.dtype) for k, v in ARRAYS.items()})
    nd.save(g, [nd.array(v, dtype=v.dtype) for v in ARRAYS.values()])
    ref = tmp_path / "ref.npz"
    np.savez(ref, **{f"a{i}": v for i, v in enumerate(ARRAYS.values())})
    out = mxnet_python(f"""
import mxnet as mx, numpy as np, json
d = mx.nd.load({str(f)!r}); l = mx.nd.load({str(g)!r}); ref = np.load({str(ref)!r})
assert isinstance(d, dict) and isinstance(l, list)
assert list(d) == {list(ARRAYS)!r}, list(d)
for i, (k, v) in enumerate(d.items()):
    w = ref["a%d" % i]
    for x in (v, l[i]):
        a = x.asnumpy()
        assert a.dtype == w.dtype and a.shape == w.shape and a.tobytes() == w.tobytes(), k
mx.nd.save({str(tmp_path / 'back.params')!r}, d)
print("ok")
""")
    assert out.strip() == "ok"
    # and MXNet's re-save of mxfn's file is byte-identical to it
    assert (tmp_path / "back.params").read_bytes() == f.read_bytes()


def test_mxfn_reads_what_mxnet_writes(tmp_path, mxnet_python):
    f = tmp_path / "m.params"
    mxnet_python(f"""
import mxnet as mx, numpy as np
mx.nd.save({str(f)!r}, {{"arg:w": mx.nd.array(np.arange(6).reshape(2, 3)), "aux:m": mx.nd.array([7], dtype="int64"),
             "h": mx.nd.array([1, 2], dtype="float16"), "u": mx.nd.array([3], dtype="uint8")}})
""")
    d = nd.load(f)
    assert list(d) == ["arg:w", "aux:m", "h", "u"]
    np.testing.assert_array_equal(d["arg:w"].asnumpy(), np.arange(6, dtype=np.float32).reshape(2, 3))
    assert d["aux:m"].dtype == np.int64 and d["h"].dtype == np.float16 and d["u"].dtype == np.uint8
