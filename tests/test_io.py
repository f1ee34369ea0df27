"""mx.io: descs, batches, NDArrayIter's last-batch modes and shuffling, MNIST, CSV, bucketing,
prefetching and resizing — checked against hand-worked values and MXNet 1.9.1."""

import gc
import gzip
import json
import os
import pathlib
import subprocess
import sys
import threading

import numpy as np
import pytest
import toolz

import mxfn as mx
from mxfn import io

MNIST = pathlib.Path(__file__).resolve().parent.parent / "data" / "mnist"


def rows(it):
    """(data rows as lists, pad) of the rest of the epoch; checks that labels follow data."""
    out = []
    for b in it:
        d = b["data"][0].asnumpy()
        if b["label"]:
            np.testing.assert_array_equal(b["label"][0].asnumpy(), d.reshape(len(d), -1)[:, 0])
        out.append((d.reshape(len(d), -1)[:, 0].astype(int).tolist(), b["pad"]))
    return out


def arange_iter(n, bs, mode="pad", **kw):
    x = np.arange(n, dtype=np.float32)
    return io.ndarray_iter(x.reshape(n, 1), label=x, batch_size=bs, last_batch_handle=mode, **kw)


# -- descs and batches ----------------------------------------------------------------------

@pytest.mark.parametrize("shape,layout", [((4,), "N"), ((4, 3), "NC"), ((4, 3, 2), "NTC"),
                                          ((4, 3, 2, 2), "NCHW"), ((4, 3, 2, 2, 2), "NCDHW"),
                                          ((1, 1, 1, 1, 1, 1), None)])
def test_data_desc_default_layout_by_rank(shape, layout):
    d = io.data_desc("x", shape)
    assert d["layout"] == layout and d.layout == layout
    assert io.batch_axis(d) == 0
    assert d == io.data_desc({"name": "x", "shape": list(shape)})


def test_data_desc_forms_and_batch_axis():
    d = io.data_desc("seq", (10, 4, 8), {"layout": "TNC"}, dtype=np.float16)
    assert (d.name, d.shape, d.dtype, d.layout) == ("seq", (10, 4, 8), "float16", "TNC")
    assert io.batch_axis(d) == 1
    assert io.batch_axis(("y", (3,))) == 0
    assert io.batch_axis(io.data_desc("z", (3, 4), layout="TC")) == -1
    assert io.as_data_desc({"name": "a", "shape": (2,)})["dtype"] == "float32"
    with pytest.raises(mx.MXFNError, match="shape"):
        io.data_desc({"name": "x"})
    with pytest.raises(mx.MXFNError, match="layuot"):
        io.data_desc("x", (2,), layuot="N")
    with pytest.raises(TypeError):
        io.data_desc("x", "2x3")


@pytest.mark.parametrize("make", [
    lambda: io.data_desc("x", (2, 3)),
    lambda: io.data_batch(data=[np.ones((2, 3))], label=[np.zeros(2)]),
    lambda: io.next(arange_iter(4, 2)),
], ids=["data_desc", "data_batch", "iterator batch"])
def test_descs_and_batches_are_immutable(make):
    m = make()
    key = next(iter(m))
    with pytest.raises(TypeError):
        m[key] = 1
    with pytest.raises(TypeError):
        del m[key]
    with pytest.raises(TypeError):
        m.extra = 1
    changed = toolz.assoc(m, key, "new")
    assert changed[key] == "new" and m[key] != "new"
    assert toolz.merge(m, {"more": 1})["more"] == 1 and "more" not in m


def test_data_batch_fields_and_accessors():
    b = io.data_batch({"data": np.ones((2, 3)), "label": [np.arange(2)]}, pad=1, bucket_key=5,
                      index=np.array([4, 7]), provide_data=[("data", (2, 3))])
    assert isinstance(io.batch_data(b)[0], mx.nd.NDArray) and io.batch_data(b)[0].shape == (2, 3)
    assert io.batch_label(b)[0].asnumpy().tolist() == [0, 1]
    assert io.batch_pad(b) == 1 and io.batch_index(b).tolist() == [4, 7] and b.bucket_key == 5
    assert b.provide_data[0] == {"name": "data", "shape": (2, 3), "dtype": "float32", "layout": "NC"}
    assert io.batch_pad({"data": []}) == 0 and io.batch_label({"data": []}) is None
    with pytest.raises(mx.MXFNError, match="data"):
        io.data_batch(label=[np.ones(2)])


# -- ndarray_iter ---------------------------------------------------------------------------

PAD_CASES = [  # (n, batch_size, batches as (first column, pad)) for last_batch_handle="pad"
    (8, 4, [([0, 1, 2, 3], 0), ([4, 5, 6, 7], 0)]),
    (10, 4, [([0, 1, 2, 3], 0), ([4, 5, 6, 7], 0), ([8, 9, 0, 1], 2)]),
    (3, 7, [([0, 1, 2, 0, 1, 2, 0], 4)]),
    (5, 1, [([i], 0) for i in range(5)]),
]


@pytest.mark.parametrize("n,bs,want", PAD_CASES)
def test_pad_fills_from_the_start_and_reports_pad(n, bs, want):
    it = arange_iter(n, bs)
    assert rows(it) == want
    assert rows(it) == []  # the epoch is over until reset
    assert rows(io.reset(it)) == want


@pytest.mark.parametrize("n,bs,count", [(10, 4, 2), (8, 4, 2), (3, 4, 0), (10, 3, 3)])
def test_discard_drops_the_incomplete_batch(n, bs, count):
    it = arange_iter(n, bs, "discard")
    for _ in range(2):
        got = rows(it)
        assert len(got) == count and all(len(r) == bs and p == 0 for r, p in got)
        io.reset(it)


def test_roll_over_across_epochs_matches_mxnet():
    # Recorded from MXNet 1.9.1: NDArrayIter(arange(10), label, batch_size=3, 'roll_over').
    want = [
        [([0, 1, 2], 0), ([3, 4, 5], 0), ([6, 7, 8], 0)],
        [([9, 0, 1], 1), ([2, 3, 4], 0), ([5, 6, 7], 0)],
        [([8, 9, 0], 2), ([1, 2, 3], 0), ([4, 5, 6], 0), ([7, 8, 9], 0)],
    ]
    it = arange_iter(10, 3, "roll_over")
    for epoch in want:
        assert rows(it) == epoch
        io.reset(it)
    # The same through has_next-driven loops, which must also keep the left-over samples.
    it = arange_iter(10, 3, "roll_over")
    got = [io.for_batches(it, lambda b: (b["data"][0].asnumpy()[:, 0].astype(int).tolist(), b["pad"]))
           for _ in want]
    assert got == want


def test_bad_last_batch_handle_names_the_choices():
    with pytest.raises(mx.MXFNError, match="roll_over"):
        arange_iter(4, 2, "rollover")


def test_seeded_shuffle_same_seed_same_order_and_reshuffles_at_reset():
    a, b = arange_iter(50, 10, shuffle=True, seed=11), arange_iter(50, 10, shuffle=True, seed=11)
    ea, eb = rows(a), rows(b)
    assert ea == eb
    flat = [v for r, _ in ea for v in r]
    assert sorted(flat) == list(range(50)) and flat != list(range(50))
    second = rows(io.reset(a))
    assert second != ea and sorted(v for r, _ in second for v in r) == list(range(50))
    assert rows(io.reset(b)) == second
    assert rows(arange_iter(50, 10, shuffle=True, seed=12)) != ea


def test_shuffle_without_seed_follows_the_global_seed():
    mx.random.seed(5)
    first = rows(arange_iter(30, 10, shuffle=True))
    mx.random.seed(5)
    assert rows(arange_iter(30, 10, shuffle=True)) == first


def test_shuffled_pad_fills_from_the_epoch_order_and_index_tracks_samples():
    it = arange_iter(7, 3, shuffle=True, seed=1)
    batches = list(it)
    order = [v for b in batches[:2] for v in b["data"][0].asnumpy()[:, 0].astype(int)]
    last = batches[2]["data"][0].asnumpy()[:, 0].astype(int).tolist()
    assert batches[2]["pad"] == 2 and last[1:] == order[:2]
    for b in batches:
        np.testing.assert_array_equal(b["index"], b["data"][0].asnumpy()[:, 0])


def test_list_and_dict_naming():
    x = np.zeros((4, 2))
    it = io.ndarray_iter([x, x, x], label=[np.zeros(4), np.zeros(4)], batch_size=2)
    assert [d["name"] for d in io.provide_data(it)] == ["_0_data", "_1_data", "_2_data"]
    assert [d["name"] for d in io.provide_label(it)] == ["_0_softmax_label", "_1_softmax_label"]
    it = io.ndarray_iter([x], label=[np.zeros(4)], data_name="img", label_name="y")
    assert [d["name"] for d in io.provide_data(it) + io.provide_label(it)] == ["img", "y"]
    assert [d["name"] for d in io.provide_data(io.ndarray_iter([x, x], data_name="img"))] == ["_0_img", "_1_img"]
    it = io.ndarray_iter({"zeta": x, "alpha": np.ones((4, 3))}, label={"lbl": np.zeros(4)}, batch_size=2)
    assert [(d["name"], d["shape"]) for d in io.provide_data(it)] == [("zeta", (2, 2)), ("alpha", (2, 3))]
    b = io.next(it)
    assert [a.shape for a in b["data"]] == [(2, 2), (2, 3)] and io.provide_label(it)[0]["name"] == "lbl"


def test_dtypes_numpy_becomes_float32_ndarray_keeps_its_own():
    it = io.ndarray_iter(np.arange(4.0), label=mx.nd.array([1, 2, 3, 4], dtype="int32"), batch_size=2)
    b = io.next(it)
    assert b["data"][0].dtype == np.float32 and b["label"][0].dtype == np.int32
    assert [d["dtype"] for d in io.provide_data(it) + io.provide_label(it)] == ["float32", "int32"]


def test_options_spelled_other_ways():
    it = io.ndarray_iter(np.zeros((6, 2)), {"data-batch-size": 3}, lastBatchHandle="discard")
    assert it.batch_size == 3 and len(list(it)) == 2


ERRORS = [
    ("batch_size 0", lambda: io.ndarray_iter(np.zeros((4, 2)), batch_size=0), ["batch_size", "0"]),
    ("negative batch_size", lambda: io.ndarray_iter(np.zeros((4, 2)), batch_size=-2), ["batch_size", "-2"]),
    ("lengths differ", lambda: io.ndarray_iter(np.zeros((4, 2)), label=np.zeros(3)),
     ["softmax_label", "3 samples", "4"]),
    ("list lengths differ", lambda: io.ndarray_iter([np.zeros(4), np.zeros(5)]), ["_1_data", "5"]),
    ("empty list", lambda: io.ndarray_iter([]), ["data", "empty"]),
    ("empty dict", lambda: io.ndarray_iter({}), ["data", "empty"]),
    ("no samples", lambda: io.ndarray_iter(np.zeros((0, 3))), ["empty", "(0, 3)"]),
    ("unknown option", lambda: io.ndarray_iter(np.zeros(2), batchsize=1), ["batchsize", "batch_size"]),
    ("mnist batch_size 0", lambda: io.mnist_iter(image=MNIST / "t10k-images-idx3-ubyte.gz",
                                                 label=MNIST / "t10k-labels-idx1-ubyte.gz", batch_size=0),
     ["batch_size"]),
    ("mnist input_shape", lambda: io.mnist_iter(image=MNIST / "t10k-images-idx3-ubyte.gz",
                                                label=MNIST / "t10k-labels-idx1-ubyte.gz", input_shape=(3, 3)),
     ["input_shape", "784", "(3, 3)"]),
    ("mnist images as labels", lambda: io.mnist_iter(image=MNIST / "t10k-images-idx3-ubyte.gz",
                                                     label=MNIST / "t10k-images-idx3-ubyte.gz"),
     ["t10k-images-idx3-ubyte.gz", "2051", "2049"]),
    ("bucket layout", lambda: io.bucket_sentence_iter([[1, 2]], 1, layout="NTC"), ["layout", "NTC"]),
    ("bucket nothing fits", lambda: io.bucket_sentence_iter([[1, 2, 3]], 1, buckets=[2]), ["bucket"]),
    ("resize size", lambda: io.resize_iter(arange_iter(4, 2), -1), ["size"]),
]


@pytest.mark.parametrize("name,call,words", ERRORS, ids=[e[0] for e in ERRORS])
def test_bad_input_raises_mxfnerror(name, call, words):
    with pytest.raises(mx.MXFNError) as e:
        call()
    for w in words:
        assert w.lower() in str(e.value).lower(), f"{w!r} not in {e.value}"


# -- iteration protocol ---------------------------------------------------------------------

def test_iteration_runs_the_rest_of_the_epoch_and_functions_reset_first():
    it = arange_iter(6, 2)
    io.next(it)
    assert len(list(it)) == 2 and list(it) == [] and not io.has_next(it)
    with pytest.raises(StopIteration):
        io.next(it)
    assert io.do_batches(it, lambda b: None) is it
    assert io.for_batches(it, lambda b: b["pad"]) == [0, 0, 0]
    assert io.reduce_batches(it, lambda acc, b: acc + len(b["data"][0]), 0) == 6
    assert toolz.thread_first(it, io.reset, io.has_next) is True
    assert builtin_next(iter(it))["pad"] == 0


builtin_next = next


# -- MNIST ----------------------------------------------------------------------------------

def _idx(path):
    raw = gzip.open(path, "rb").read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


@pytest.mark.parametrize("part,count,first", [("train", 60000, [5, 0, 4, 1, 9]), ("t10k", 10000, [7, 2, 1, 0, 4])])
def test_mnist_from_the_repo_files(part, count, first):
    it = io.mnist_iter(image=MNIST / f"{part}-images-idx3-ubyte.gz", label=MNIST / f"{part}-labels-idx1-ubyte.gz",
                       shuffle=False, silent=True)
    assert it.batch_size == 128
    assert io.provide_data(it) == [io.data_desc("data", (128, 1, 28, 28))]
    assert io.provide_label(it) == [io.data_desc("softmax_label", (128,))]
    batches = list(it)
    assert len(batches) == -(-count // 128) and batches[-1]["pad"] == (-count) % 128
    b = batches[0]
    assert b["label"][0].asnumpy()[:5].tolist() == first
    px = b["data"][0].asnumpy()
    want = _idx(MNIST / f"{part}-images-idx3-ubyte.gz")[:128].astype(np.float32) / 255
    np.testing.assert_allclose(px[:, 0], want, rtol=1e-6)
    assert px.min() == 0.0 and px.max() == 1.0
    assert b["index"].tolist() == list(range(128))


def test_mnist_defaults_shuffle_with_seed_0_and_shapes():
    kw = dict(image=MNIST / "t10k-images-idx3-ubyte.gz", label=MNIST / "t10k-labels-idx1-ubyte.gz", silent=True)
    a, b = io.mnist_iter(kw), io.mnist_iter(kw)
    la, lb = io.next(a), io.next(b)
    assert la["index"].tolist() == lb["index"].tolist() != list(range(128))
    labels = _idx(MNIST / "t10k-labels-idx1-ubyte.gz")
    assert la["label"][0].asnumpy().tolist() == labels[la["index"]].tolist()
    io.reset(a)
    assert io.next(a)["index"].tolist() != la["index"].tolist()
    assert io.provide_data(io.mnist_iter(kw, flat=True, batch_size=10))[0]["shape"] == (10, 784)
    assert io.provide_data(io.mnist_iter(kw, input_shape=(28, 28), batch_size=10))[0]["shape"] == (10, 28, 28)
    assert io.mnist_iter(kw, num_parts=4, part_index=3, batch_size=2500, shuffle=False).next()["index"][0] == 7500


@pytest.mark.parametrize("content,words", [
    ((1234).to_bytes(4, "big") + bytes(12), ["wrong.idx", "1234", "2051"]),
    ((2051).to_bytes(4, "big") + (2).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2 + bytes(100),
     ["wrong.idx", "1568", "100"]),
    (b"\x00\x00", ["wrong.idx", "too short"]),
], ids=["magic", "truncated", "tiny"])
def test_hand_written_bad_idx_files(tmp_path, content, words):
    f = tmp_path / "wrong.idx"
    f.write_bytes(content)
    with pytest.raises(mx.MXFNError) as e:
        io.mnist_iter(image=f, label=MNIST / "t10k-labels-idx1-ubyte.gz")
    for w in words:
        assert w in str(e.value)
    gz = tmp_path / "wrong.idx.gz"
    gz.write_bytes(gzip.compress(content))
    with pytest.raises(mx.MXFNError, match="wrong.idx.gz"):
        io.mnist_iter(image=gz, label=MNIST / "t10k-labels-idx1-ubyte.gz")


def test_mnist_missing_file_and_mismatched_counts(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope"):
        io.mnist_iter(image=tmp_path / "nope", label=tmp_path / "nope")
    lab = tmp_path / "labels.idx"
    lab.write_bytes((2049).to_bytes(4, "big") + (3).to_bytes(4, "big") + bytes([1, 2, 3]))
    with pytest.raises(mx.MXFNError, match="labels.idx"):
        io.mnist_iter(image=MNIST / "t10k-images-idx3-ubyte.gz", label=lab)


# -- CSV ------------------------------------------------------------------------------------

@pytest.fixture
def csv_files(tmp_path):
    d, lab = tmp_path / "d.csv", tmp_path / "l.csv"
    d.write_text("1,2,3\n2,3,4\n3,4,5\n4,5,6\n5,6,7\n")
    lab.write_text("1\n2\n3\n4\n5\n")
    return d, lab


def test_csv_round_batch_matches_mxnet(csv_files):
    d, lab = csv_files
    it = io.csv_iter(data_csv=d, data_shape=(3,), batch_size=3)
    assert io.provide_label(it)[0]["shape"] == (3,)
    # Recorded from MXNet 1.9.1's CSVIter on the same file: (first column, label, pad, index).
    want = [
        [([1, 2, 3], 0, [0, 1, 2]), ([4, 5, 1], 1, [3, 4, 0])],
        [([2, 3, 4], 0, [1, 2, 3]), ([5, 1, 2], 2, [4, 0, 1])],
        [([3, 4, 5], 0, [2, 3, 4])],
    ]
    it = io.csv_iter(data_csv=d, data_shape=(3,), batch_size=3)
    for epoch in want:
        batches = list(it)
        assert [(b["data"][0].asnumpy()[:, 0].astype(int).tolist(), b["pad"], b["index"].tolist())
                for b in batches] == epoch
        assert all(not b["label"][0].asnumpy().any() for b in batches)  # no label_csv: zeros
        io.reset(it)


def test_csv_without_round_batch_and_with_labels(csv_files):
    d, lab = csv_files
    it = io.csv_iter(data_csv=d, data_shape=(3,), label_csv=lab, batch_size=3, round_batch=False)
    for _ in range(2):
        got = [(b["data"][0].asnumpy()[:, 0].tolist(), b["label"][0].asnumpy().tolist(), b["pad"]) for b in it]
        assert got == [([1, 2, 3], [1, 2, 3], 0), ([4, 5, 3], [4, 5, 3], 1)]
        io.reset(it)
    it = io.csv_iter(data_csv=d, data_shape=(1, 3), label_csv=lab, label_shape=(1, 1), batch_size=5, dtype="int32")
    b = io.next(it)
    assert b["data"][0].shape == (5, 1, 3) and b["label"][0].shape == (5, 1, 1) and b["data"][0].dtype == np.int32


def test_csv_errors_name_file_and_line(tmp_path, csv_files):
    d, lab = csv_files
    bad = tmp_path / "bad.csv"
    bad.write_text("1,2,3\n4,x,6\n")
    with pytest.raises(mx.MXFNError, match=r"bad.csv.*line 2.*\"x\""):
        io.csv_iter(data_csv=bad, data_shape=(3,), batch_size=1)
    with pytest.raises(mx.MXFNError, match=r"d.csv.*line 1.*3 values.*4"):
        io.csv_iter(data_csv=d, data_shape=(2, 2), batch_size=1)
    short = tmp_path / "short.csv"
    short.write_text("1\n2\n")
    with pytest.raises(mx.MXFNError, match="short.csv"):
        io.csv_iter(data_csv=d, data_shape=(3,), label_csv=short, batch_size=1)
    with pytest.raises(mx.MXFNError, match="round_batch"):
        io.csv_iter(data_csv=d, data_shape=(3,), batch_size=6)
    with pytest.raises(mx.MXFNError, match="batch_size"):
        io.csv_iter(data_csv=d, data_shape=(3,), batch_size=0)
    with pytest.raises(mx.MXFNError, match="data_shape"):
        io.csv_iter(data_csv=d, batch_size=1)


# -- bucketing ------------------------------------------------------------------------------

def test_bucket_keys_shapes_and_labels():
    rng = np.random.default_rng(0)
    sents = [rng.integers(1, 50, size=int(n)).tolist() for n in rng.integers(1, 12, size=200)]
    it = io.bucket_sentence_iter(sents, 8, buckets=[4, 8, 12], seed=3)
    assert it.default_bucket_key == 12
    assert io.provide_data(it) == [io.data_desc("data", (8, 12), layout="NT")]
    keys = []
    for b in it:
        k = b["bucket_key"]
        keys.append(k)
        d, lab = b["data"][0].asnumpy(), b["label"][0].asnumpy()
        assert d.shape == lab.shape == (8, k) and b["pad"] == 0
        assert b["provide_data"] == [io.data_desc("data", (8, k), layout="NT")]
        assert b["provide_label"][0]["name"] == "softmax_label"
        np.testing.assert_array_equal(lab[:, :-1], d[:, 1:])
        assert (lab[:, -1] == -1).all()
        for row in d:  # a real sentence, padded with invalid_label
            n = int((row != -1).sum())
            assert row[:n].tolist() in [[float(t) for t in s] for s in sents if len(s) == n]
    counts = {k: sum(1 for s in sents if lo < len(s) <= k) // 8 for lo, k in [(0, 4), (4, 8), (8, 12)]}
    assert sorted(keys) == sorted(k for k, c in counts.items() for _ in range(c))
    again = io.bucket_sentence_iter(sents, 8, buckets=[4, 8, 12], seed=3)
    assert [b["bucket_key"] for b in again] == keys
    assert [b["bucket_key"] for b in io.reset(again)] != keys or len(set(keys)) == 1


def test_bucket_time_major_auto_buckets_and_discard_warning(caplog):
    sents = [[1, 2]] * 4 + [[3, 4, 5]] * 4 + [[6]]
    it = io.bucket_sentence_iter(sents, 2, layout="TN", invalid_label=0, seed=1)
    assert it.default_bucket_key == 3 and io.provide_data(it)[0]["shape"] == (3, 2)
    shapes = sorted((b["bucket_key"], b["data"][0].shape, b["provide_data"][0]["layout"]) for b in it)
    assert shapes == [(2, (2, 2), "TN")] * 2 + [(3, (3, 2), "TN")] * 2
    with caplog.at_level("WARNING", logger="mxfn"):
        io.bucket_sentence_iter(sents, 2, buckets=[2])
    assert "discarded 4" in caplog.text


# -- prefetching and resizing ---------------------------------------------------------------

def _snapshot(b):
    return ([a.asnumpy().tolist() for a in b["data"]], [a.asnumpy().tolist() for a in b["label"]], b["pad"],
            None if b["index"] is None else b["index"].tolist())


@pytest.mark.parametrize("make", [
    lambda: arange_iter(23, 5, shuffle=True, seed=4),
    lambda: arange_iter(10, 3, "roll_over"),
    lambda: io.mnist_iter(image=MNIST / "t10k-images-idx3-ubyte.gz", label=MNIST / "t10k-labels-idx1-ubyte.gz",
                          batch_size=1000, silent=True),
], ids=["shuffled pad", "roll_over", "mnist"])
def test_prefetching_gives_the_plain_iterators_batches(make):
    plain, pre = make(), io.prefetching_iter(make())
    try:
        assert io.provide_data(pre) == io.provide_data(plain) and pre.batch_size == plain.batch_size
        for _ in range(3):
            assert [_snapshot(b) for b in pre] == [_snapshot(b) for b in plain]
            io.reset(pre), io.reset(plain)
        assert io.do_batches(pre, lambda b: None) is pre
    finally:
        pre.close()


def test_prefetching_merges_iterators_with_renames():
    a, b = arange_iter(6, 2), io.ndarray_iter(np.ones((6, 3)), batch_size=2)
    pre = io.prefetching_iter([a, b], rename_data=[{"data": "d1"}, {"data": "d2"}])
    assert [d["name"] for d in io.provide_data(pre)] == ["d1", "d2"]
    batches = list(pre)
    assert len(batches) == 3 and [x.shape for x in batches[0]["data"]] == [(2, 1), (2, 3)]
    assert [d["name"] for d in batches[0]["provide_data"]] == ["d1", "d2"]
    pre.close()


class _Failing(io.DataIter):
    batch_size = 1

    def __init__(self):
        self.n = 0

    def next(self):
        self.n += 1
        if self.n == 2:
            raise RuntimeError("disk on fire")
        if self.n > 3:
            raise StopIteration
        return io.data_batch(data=[np.full((1, 1), self.n)])

    def has_next(self):
        return self.n < 3

    def reset(self):
        self.n = 0


def test_prefetching_propagates_errors_and_closes_cleanly():
    pre = io.prefetching_iter(_Failing())
    assert io.next(pre)["data"][0].asnumpy().item() == 1
    with pytest.raises(RuntimeError, match="disk on fire"):
        io.next(pre)
    assert io.next(pre)["data"][0].asnumpy().item() == 3
    assert not io.has_next(pre)
    thread = pre._f.thread
    pre.close()
    assert not thread.is_alive()
    with pytest.raises(mx.MXFNError, match="closed"):
        io.next(pre)


def test_prefetching_thread_stops_when_collected():
    before = {t for t in threading.enumerate() if t.name == "mxfn-prefetch"}
    pre = io.prefetching_iter(arange_iter(10, 2))
    io.next(pre)
    thread = pre._f.thread
    del pre
    gc.collect()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert {t for t in threading.enumerate() if t.name == "mxfn-prefetch"} <= before


def test_interpreter_exits_with_a_prefetcher_mid_epoch():
    code = ("import numpy as np\nfrom mxfn import io\n"
            "it = io.prefetching_iter(io.ndarray_iter(np.zeros((100000, 50)), batch_size=7))\n"
            "io.next(it)\nkeep = [io.prefetching_iter(io.ndarray_iter(np.zeros((10, 2)), batch_size=2))]\n"
            "print('done')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "done", out.stderr


@pytest.mark.parametrize("size,want", [
    (5, [[0, 1], [2, 3], [4, 5], [0, 1], [2, 3]]),
    (2, [[0, 1], [2, 3]]),
])
def test_resize_iter(size, want):
    it = io.resize_iter(arange_iter(6, 2), size)
    assert it.batch_size == 2 and io.provide_data(it)[0]["shape"] == (2, 1)
    assert [r for r, _ in rows(it)] == want
    assert not io.has_next(it) and list(it) == []
    assert [r for r, _ in rows(io.reset(it))] == want


def test_resize_without_resetting_the_inner_iterator_continues_it():
    it = io.resize_iter(arange_iter(6, 2), 2, reset_internal=False)
    assert [r for r, _ in rows(it)] == [[0, 1], [2, 3]]
    assert [r for r, _ in rows(io.reset(it))] == [[4, 5], [0, 1]]


# -- against MXNet 1.9.1 --------------------------------------------------------------------

GRID = [(n, bs, mode, True) for n in (7, 9, 12) for bs in (2, 4, 5) for mode in ("pad", "discard", "roll_over")]


def test_ndarray_iter_grid_matches_mxnet(mxnet_python):
    code = f"""
import json, mxnet as mx, numpy as np
out = []
for n, bs, mode, _ in {GRID!r}:
    x = np.arange(n, dtype=np.float32).reshape(n, 1)
    it = mx.io.NDArrayIter(x, x[:, 0], bs, last_batch_handle=mode)
    epochs = []
    for _ in range(3):
        epochs.append([(b.data[0].asnumpy()[:, 0].astype(int).tolist(), b.pad) for b in it])
        it.reset()
    out.append(epochs)
print(json.dumps(out))
"""
    want = json.loads(mxnet_python(code))
    for (n, bs, mode, _), epochs in zip(GRID, want):
        it = arange_iter(n, bs, mode)
        got = []
        for _ in range(3):
            got.append([[r, p] for r, p in rows(it)])
            io.reset(it)
        assert got == epochs, (n, bs, mode)
