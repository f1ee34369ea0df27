"""mx.kvstore: local/device stores, push sums, updates on the store, pull returns values."""

import numpy as np
import pytest

import mxfn as mx
from mxfn import kvstore as kv_ns


def test_create_types_and_queries():
    for name in ("local", "device"):
        kv = kv_ns.create(name)
        assert kv_ns.kv_type(kv) == name and kv_ns.rank(kv) == 0 and kv_ns.num_workers(kv) == 1
        assert kv_ns.barrier(kv) is kv
    assert kv_ns.kv_type(kv_ns.create()) == "local"
    for bad in ("nccl", "locl"):
        with pytest.raises(mx.MXFNError, match="local"):
            kv_ns.create(bad)
    # Distributed stores: one worker outside mpiexec (tests/test_dist.py runs several).
    for name in ("dist_sync", "dist_device_sync", "horovod"):
        kv = kv_ns.create(name)
        assert kv_ns.kv_type(kv) == name and kv_ns.rank(kv) == 0 and kv_ns.num_workers(kv) == 1
    with pytest.raises(mx.MXFNError, match='"dist_async" is not supported'):
        kv_ns.create("dist_async")
    with pytest.raises(TypeError):
        kv_ns.create(3)


def test_push_sums_devices_and_replaces_without_optimizer():
    kv = kv_ns.init(kv_ns.create(), 3, mx.nd.ones((2, 2)))
    assert kv_ns.push(kv, 3, [mx.nd.ones((2, 2), ctx=mx.cpu(i)) * (i + 1) for i in range(3)]) is kv
    np.testing.assert_array_equal(kv_ns.pull(kv, 3).asnumpy(), np.full((2, 2), 6.0))
    kv_ns.push(kv, 3, np.full((2, 2), 2.0))
    np.testing.assert_array_equal(kv_ns.pull(kv, 3, None).asnumpy(), np.full((2, 2), 2.0))


def test_multiple_keys_and_outs_structure():
    kv = kv_ns.init(kv_ns.create(), ["a", "b"], [mx.nd.zeros(2), mx.nd.ones(2)])
    kv_ns.push(kv, ["a", "b"], [[mx.nd.ones(2), mx.nd.ones(2)], mx.nd.full((2,), 5.0)])
    a, b = kv_ns.pull(kv, ["a", "b"])
    np.testing.assert_array_equal(a.asnumpy(), [2, 2])
    np.testing.assert_array_equal(b.asnumpy(), [5, 5])
    outs = [mx.nd.zeros(2, ctx=mx.cpu(0)), mx.nd.zeros(2, ctx=mx.cpu(1))]
    got = kv_ns.pull(kv, "a", outs)
    assert len(got) == 2 and [g.context for g in got] == [mx.cpu(0), mx.cpu(1)]
    assert got[0] is outs[0] and got[1] is outs[1]
    # MXNet fills every given array with the stored value
    for o in outs:
        np.testing.assert_array_equal(o.asnumpy(), [2, 2])
    one = mx.nd.zeros(2, dtype="float64")
    kv_ns.pull(kv, "b", one)
    assert one.dtype == np.float64
    np.testing.assert_array_equal(one.asnumpy(), [5, 5])
    with pytest.raises(mx.MXFNError, match=r"outs for key 'b' has shape \(3,\)"):
        kv_ns.pull(kv, "b", mx.nd.zeros(3))
    assert kv_ns.keys(kv) == ["a", "b"]


def test_pull_returns_copies():
    w = mx.nd.ones(2)
    kv = kv_ns.init(kv_ns.create(), 0, w)
    got = kv_ns.pull(kv, 0)
    kv_ns.push(kv, 0, mx.nd.zeros(2))
    np.testing.assert_array_equal(got.asnumpy(), [1, 1])
    np.testing.assert_array_equal(w.asnumpy(), [1, 1])


def test_update_on_kvstore_matches_optimizer():
    opt = mx.optimizer.sgd(learning_rate=0.1, momentum=0.9)
    kv = kv_ns.set_optimizer(kv_ns.create("device"), opt)
    kv_ns.init(kv, [0, 1], [mx.nd.ones(3), mx.nd.ones(2)])
    ref = mx.optimizer.get_updater(mx.optimizer.sgd(learning_rate=0.1, momentum=0.9))
    w_ref = mx.nd.ones(3)
    for step in range(3):
        g = [mx.nd.full((3,), 0.5 * (step + 1)), mx.nd.full((3,), 0.25)]
        kv_ns.push(kv, 0, g)
        ref(0, g[0] + g[1], w_ref)
    np.testing.assert_allclose(kv_ns.pull(kv, 0).asnumpy(), w_ref.asnumpy(), rtol=1e-6)
    np.testing.assert_array_equal(kv_ns.pull(kv, 1).asnumpy(), [1, 1])


def test_errors():
    kv = kv_ns.create()
    with pytest.raises(mx.MXFNError, match="init"):
        kv_ns.push(kv, "w", mx.nd.ones(1))
    with pytest.raises(mx.MXFNError, match="init"):
        kv_ns.pull(kv, "w")
    kv_ns.init(kv, "w", mx.nd.ones(2))
    with pytest.raises(mx.MXFNError, match="already"):
        kv_ns.init(kv, "w", mx.nd.ones(2))
    with pytest.raises(mx.MXFNError, match="shape"):
        kv_ns.push(kv, "w", mx.nd.ones(3))
    with pytest.raises(mx.MXFNError, match="one entry per key"):
        kv_ns.push(kv, ["w", "w"], [mx.nd.ones(2)])
    with pytest.raises(TypeError):
        kv_ns.push(kv, 1.5, mx.nd.ones(2))
    with pytest.raises(TypeError):
        kv_ns.init("kv", "x", mx.nd.ones(1))
