"""Data parallelism over MPI (SPEC §9.2): dist kvstores, fit with kvstore="dist_sync", the
data split, pooled metrics, failures. The multi-worker tests run real 2-worker jobs
(``mpiexec -n 2``, the scripts in tests/dist/) and compare them with one process."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import mxfn as mx
from mxfn import _fit, metric

HERE = os.path.dirname(os.path.abspath(__file__))
DIST = os.path.join(HERE, "dist")
MNIST = os.path.join(HERE, "..", "data", "mnist")
MPIEXEC = shutil.which("mpiexec")
HAVE_MPI4PY = importlib.util.find_spec("mpi4py") is not None
needs_mpi = pytest.mark.skipif(
    MPIEXEC is None or not HAVE_MPI4PY,
    reason="needs mpiexec and mpi4py (pip install mpich mpi4py; .ci/run installs them)")
LAUNCHER_VARS = ("PMI_RANK", "PMI_SIZE", "PMI_FD", "PMI_PORT", "OMPI_COMM_WORLD_RANK",
                 "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE")


def _env(**extra):
    """This environment without an MPI launcher's variables, one thread per worker."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env.update(RAYON_NUM_THREADS="1", PYTHONUNBUFFERED="1", **extra)
    return env


def _python(*args, timeout=120, **env):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout,
                          env=_env(**env))


def _mpiexec(n, *args, timeout=180, **env):
    return subprocess.run([MPIEXEC, "-n", str(n), sys.executable, *args], capture_output=True,
                          text=True, timeout=timeout, env=_env(**env))


def _ok(r):
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r


def _json(path):
    with open(path) as f:
        return json.load(f)


# -- one process --------------------------------------------------------------------------------

def test_outside_mpiexec_dist_sync_is_one_worker_without_mpi():
    r = _ok(_python("-c", "import sys, mxfn as mx\n"
                          "kv = mx.kvstore.create('dist_sync')\n"
                          "mx.kvstore.init(kv, 'w', mx.nd.ones(2))\n"
                          "mx.kvstore.push(kv, 'w', [mx.nd.ones(2), mx.nd.ones(2)])\n"
                          "print(mx.kvstore.rank(kv), mx.kvstore.num_workers(kv), mx.kvstore.kv_type(kv),\n"
                          "      mx.kvstore.pull(kv, 'w').asnumpy().tolist(), 'mpi4py' in sys.modules)"))
    assert r.stdout.split() == ["0", "1", "dist_sync", "[2.0,", "2.0]", "False"]


@pytest.mark.parametrize("name", ["dist_async", "dist_device_async"])
def test_dist_async_is_refused_saying_why(name):
    with pytest.raises(mx.MXFNError, match=f'"{name}" is not supported: .*synchronous.*parameter server'):
        mx.kvstore.create(name)
    net = mx.sym.fully_connected(mx.sym.variable("data"), num_hidden=2, name="fc")
    mod = mx.module.init_params(mx.module.bind(mx.module.module(net, label_names=None),
                                               data_shapes=[("data", (2, 3))]))
    with pytest.raises(mx.MXFNError, match="not supported"):
        mx.module.init_optimizer(mod, kvstore=name)


def test_fit_with_dist_sync_in_one_process_trains_as_local():
    x = np.random.RandomState(0).normal(size=(64, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("float32")
    net = mx.sym.softmax_output(mx.sym.fully_connected(mx.sym.variable("data"), num_hidden=2, name="fc"),
                                name="softmax")
    params = {}
    for kv in ("local", "dist_sync", "horovod"):
        mx.random.seed(3)
        mod = mx.module.fit(mx.module.module(net), mx.io.ndarray_iter(x, label=y, batch_size=8),
                            num_epoch=2, kvstore=kv, optimizer_params={"learning_rate": 0.3})
        params[kv] = {k: v.asnumpy() for k, v in mx.module.get_params(mod)[0].items()}
    for kv in ("dist_sync", "horovod"):
        for k, v in params["local"].items():
            np.testing.assert_array_equal(params[kv][k], v)


def test_under_mpiexec_without_mpi4py_the_error_names_it():
    code = ("import sys; sys.modules['mpi4py'] = None\n"
            "import mxfn as mx\n"
            "try:\n"
            "    mx.kvstore.create('dist_sync')\n"
            "except mx.MXFNError as e:\n"
            "    print(e)\n")
    r = _ok(_python("-c", code, PMI_RANK="0", PMI_SIZE="2"))
    assert "one of 2 started by mpiexec" in r.stdout and "mpi4py" in r.stdout
    assert 'pip install "mxfn[mpi]"' in r.stdout


def test_iterators_read_their_part_under_mpiexec_by_default(tmp_path):
    """Started as worker 1 of 2 (the launcher's environment), the iterators read the second
    half; explicit num_parts / part_index win."""
    csv = tmp_path / "d.csv"
    csv.write_text("".join(f"{i},{i}\n" for i in range(10)))
    code = f"""
import numpy as np, mxfn as mx
def rows(it):
    return [v for b in it for v in b["data"][0].asnumpy()[:, 0].tolist()[:len(b["data"][0].asnumpy()) - b["pad"]]]
print(rows(mx.io.ndarray_iter(np.arange(20.).reshape(10, 2), batch_size=5)))
print(rows(mx.io.ndarray_iter({{"data": np.arange(20.).reshape(10, 2)}}, label=np.arange(10.), batch_size=5)))
print(rows(mx.io.ndarray_iter(np.arange(20.).reshape(10, 2), batch_size=5, num_parts=1)))
print(rows(mx.io.csv_iter(data_csv={str(csv)!r}, data_shape=(2,), batch_size=5)))
print(rows(mx.io.csv_iter(data_csv={str(csv)!r}, data_shape=(2,), batch_size=2, num_parts=5, part_index=4)))
it = mx.io.mnist_iter(image={os.path.join(MNIST, "t10k-images-idx3-ubyte.gz")!r},
                      label={os.path.join(MNIST, "t10k-labels-idx1-ubyte.gz")!r}, batch_size=1000, flat=True,
                      shuffle=False, silent=True)
print(sum(1 for _ in it))
"""
    r = _ok(_python("-c", code, PMI_RANK="1", PMI_SIZE="2"))
    lines = r.stdout.splitlines()
    assert lines[0] == str([10.0, 12.0, 14.0, 16.0, 18.0])
    assert lines[1] == str([10.0, 12.0, 14.0, 16.0, 18.0])
    assert lines[2] == str([float(i) for i in range(0, 20, 2)])
    assert lines[3] == str([5.0, 6.0, 7.0, 8.0, 9.0])
    assert lines[4] == str([8.0, 9.0])
    assert lines[5] == "5"  # 5,000 of the 10,000 test images


def test_part_options_are_checked():
    with pytest.raises(mx.MXFNError, match='"part_index" must be below num_parts \\(2\\), got 2'):
        mx.io.ndarray_iter(np.zeros((4, 1)), num_parts=2, part_index=2)
    with pytest.raises(mx.MXFNError, match='"num_parts" must be at most the 4 samples, got 5'):
        mx.io.ndarray_iter(np.zeros((4, 1)), num_parts=5, part_index=0)


class _TwoWorkers:
    """A stand-in for the collective whose other worker holds ``other``'s state."""

    def __init__(self, other):
        self.other = other

    def allgather(self, state):
        return [state, _fit._metric_state(self.other)]


@pytest.mark.parametrize("make", [
    lambda: metric.create("acc"),
    lambda: metric.create(["acc", "ce", "f1"]),
    lambda: metric.custom_metric(lambda l, p: float((p.argmax(axis=1) == l).sum()) / len(l)),
    lambda: metric.pearson_correlation(average="micro"),
], ids=["acc", "composite", "custom", "pearson-micro"])
def test_pooled_metrics_equal_one_metric_over_every_workers_batches(make):
    rng = np.random.RandomState(1)
    batches = [(rng.randint(0, 2, size=n).astype("float32"), rng.uniform(size=(n, 2)).astype("float32"))
               for n in (5, 7, 4, 6)]
    whole, a, b = make(), make(), make()
    for i, (label, pred) in enumerate(batches):
        if isinstance(whole, metric.EvalMetric) and whole.name == "pearsonr":
            pred = pred[:, 1]
        for mm in (whole, (a, b)[i % 2]):
            metric.update(mm, [mx.nd.array(label)], [mx.nd.array(pred)])
    got = _fit.pooled_name_value(a, _TwoWorkers(b))
    want = metric.get_name_value(whole)
    assert [n for n, _ in got] == [n for n, _ in want]
    np.testing.assert_allclose([v for _, v in got], [v for _, v in want], rtol=1e-12)
    got = _fit.pooled_name_value(a, _TwoWorkers(b), global_=True)
    np.testing.assert_allclose([v for _, v in got], [v for _, v in metric.get_global_name_value(whole)],
                               rtol=1e-12)


# -- two workers ----------------------------------------------------------------------------------

@needs_mpi
def test_kvstore_on_two_workers(tmp_path):
    _ok(_mpiexec(2, os.path.join(DIST, "kv_api.py"), str(tmp_path)))
    r0, r1 = (_json(tmp_path / f"kv_api_{r}.json") for r in (0, 1))
    assert (r0["rank"], r1["rank"], r0["num_workers"], r0["type"]) == (0, 1, 2, "dist_sync")
    for r in (r0, r1):
        assert r["init_w"] == [[1.0] * 3] * 2 and r["init_7"] == [0.0]  # rank 0's values
        assert r["push_w"] == [[5.0] * 3] * 2  # (1 + 1) on rank 0, (2 + 1) on rank 1
        assert r["push_d"] == [0.1 + 0.2] and r["push_d_dtype"] == "float64"
        assert r["update"] == [3 - 0.5 * 3] * 2  # w = 3 (rank 0's) - lr * (1 + 2)
        assert "key 'bad' across workers: expected shape (2,)" in r["bad_shape"] and "rank 1" in r["bad_shape"]
        assert "key 'only0' is initialised on rank 0 but not on rank 1" in r["bad_key"]
        assert 'parameter "fc1_weight" across workers' in r["bad_param"], r["bad_param"]
        assert "(8, 5)" in r["bad_param"] and "(10, 5) float32 on rank 1" in r["bad_param"]
        assert '"dist_async" is not supported' in r["async"]
        assert "bucket 2 differs from the default bucket 1" in r["bucket_other_params"]
        assert "extra: ['fc_extra_bias', 'fc_extra_weight']" in r["bucket_other_params"]
    assert r0["bucket_same_params"] == r1["bucket_same_params"]  # one sum, one update


@needs_mpi
@pytest.mark.parametrize("n", [2, 3])
def test_the_collective_sums_in_rank_order_bit_identically_on_every_worker(tmp_path, n):
    _ok(_mpiexec(n, os.path.join(DIST, "allreduce.py"), str(tmp_path)))
    got = [np.load(tmp_path / f"allreduce_{r}.npz") for r in range(n)]
    for key in (k for k in got[0] if k.startswith("sum")):
        want = got[0]["want" + key[3:]]  # ((x0 + x1) + x2) in float32
        for r in range(n):
            np.testing.assert_array_equal(got[r][key], want, err_msg=f"{key} on rank {r}")
    for r in range(n):
        np.testing.assert_array_equal(got[r]["bcast"], np.full(5, n - 1, "float32"))
        assert got[r]["gather"].tolist() == list(range(n))


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """The 2-worker fit and the 1-process fit of tests/dist/train_compare.py."""
    out = tmp_path_factory.mktemp("compare")
    _ok(_mpiexec(2, os.path.join(DIST, "train_compare.py"), str(out), "dist"))
    _ok(_python(os.path.join(DIST, "train_compare.py"), str(out), "single"))
    return out


@needs_mpi
def test_two_workers_hold_bit_identical_parameters(compared):
    p0, p1 = (np.load(compared / f"dist_{r}.npz") for r in (0, 1))
    assert sorted(p0) == ["fc1_bias", "fc1_weight", "fc2_bias", "fc2_weight"]
    for k in p0:
        np.testing.assert_array_equal(p0[k], p1[k], err_msg=k)
    s0, s1 = (np.load(compared / f"dist_start_{r}.npz") for r in (0, 1))
    for k in s0:  # different seeds per worker, rank 0's values broadcast
        np.testing.assert_array_equal(s0[k], s1[k], err_msg=k)


@needs_mpi
def test_two_workers_train_as_one_process_with_the_global_batch(compared):
    dist, single = np.load(compared / "dist_0.npz"), np.load(compared / "single_0.npz")
    for k in single:
        np.testing.assert_allclose(dist[k], single[k], rtol=1e-4, atol=1e-5, err_msg=k)
    j0, j1, js = (_json(compared / f) for f in ("dist_0.json", "dist_1.json", "single_0.json"))
    assert j0["rescale_grad"] == j1["rescale_grad"] == js["rescale_grad"] == 1 / 32
    # The training metric and score are pooled over the workers: equal on both, equal to the
    # single process's.
    assert j0["history"] == j1["history"]
    np.testing.assert_allclose(j0["history"]["train-accuracy"], js["history"]["train-accuracy"], atol=1e-9)
    assert j0["score"] == j1["score"]
    np.testing.assert_allclose([v for _, v in j0["score"]], [v for _, v in js["score"]], rtol=1e-4)


@needs_mpi
def test_rank_zero_alone_logs_and_runs_epoch_end_callbacks(compared):
    j0, j1 = (_json(compared / f"dist_{r}.json") for r in (0, 1))
    assert "Epoch[1] Train-accuracy=" in j0["log"] and j0["epoch_callbacks"] == [0, 1]
    assert "Train-accuracy" not in j1["log"] and j1["epoch_callbacks"] == []


@needs_mpi
def test_mnist_on_two_workers_reaches_the_single_process_accuracy(tmp_path):
    _ok(_python(os.path.join(DIST, "mnist_acc.py"), str(tmp_path), timeout=300))
    _ok(_mpiexec(2, os.path.join(DIST, "mnist_acc.py"), str(tmp_path), timeout=300))
    single = _json(tmp_path / "mnist_1_0.json")["accuracy"]
    two = [_json(tmp_path / f"mnist_2_{r}.json")["accuracy"] for r in (0, 1)]
    assert two[0] == two[1]
    # Same global batch and updates; the workers' shuffles differ from one process's, so
    # allow 0.5 points of noise around the single-process accuracy (about 0.96 after 1 epoch).
    assert single > 0.94 and two[0] >= single - 0.005, (single, two)
    assert (tmp_path / "mnist-0001.params").exists()  # rank 0's checkpoint


@needs_mpi
def test_a_worker_that_raises_stops_every_worker_fast():
    t = time.monotonic()
    r = _mpiexec(2, os.path.join(DIST, "fail.py"), "raise", timeout=120)
    assert r.returncode != 0
    assert time.monotonic() - t < 60
    err = r.stdout + r.stderr
    assert "worker 1 fails on purpose" in err and "aborting every worker" in err, err
    assert "finished training" not in err


@needs_mpi
def test_a_worker_that_leaves_makes_the_others_stop_after_the_timeout():
    t = time.monotonic()
    r = _mpiexec(2, os.path.join(DIST, "fail.py"), "exit", timeout=120, MXFN_DIST_TIMEOUT="3")
    assert r.returncode != 0
    assert time.monotonic() - t < 60
    err = r.stdout + r.stderr
    assert "waited more than 3 s for the other workers" in err, err
