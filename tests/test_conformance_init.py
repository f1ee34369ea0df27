"""The recorded MXNet 1.9.1 initializer cases through mx.initializer: exact cases value for
value (the two spec_note cases by the SPEC's name rules), random ones by the statistics the
case README recommends, drawn from mxfn's seeded stream."""

import json

import numpy as np
import pytest

from mxfn import initializer as I
from mxfn import random as R

from conftest import conformance_dir

DIR = conformance_dir() / "init"
CASES = json.loads((DIR / "cases.json").read_text())

MAKERS = {
    "Uniform": I.uniform, "Normal": I.normal, "Xavier": I.xavier, "MSRAPrelu": I.msra_prelu,
    "Constant": I.constant, "Zero": I.zero, "One": I.one, "Orthogonal": I.orthogonal,
    "Bilinear": I.bilinear, "LSTMBias": I.lstm_bias,
}

# SPEC §2 gives moving_mean 0 and moving_var 1 by name where MXNet raised.
SPEC_VALUES = {"uniform-default-bn_moving_mean-initdesc": 0.0,
               "uniform-default-bn_moving_var-initdesc": 1.0}


def make(spec, data=None):
    if spec["class"] == "Mixed":
        return I.mixed(spec["patterns"], [make(i) for i in spec["initializers"]])
    if spec["class"] == "Load":
        params = {n: data[f"load:{n}"] for n in spec["param_names"]}
        return I.load(params, make(spec["default_init"]))
    return MAKERS[spec["class"]](**spec["kwargs"])


@pytest.mark.parametrize("case", CASES["exact"], ids=[c["id"] for c in CASES["exact"]])
def test_exact_case(case):
    data = np.load(DIR / case["npz"]) if case["npz"] else None
    init = make(case["init"], data)
    arr = np.full(case["shape"], case["initial_fill"], dtype=np.float32)
    before = arr.copy()
    if case["id"] in SPEC_VALUES:
        assert "spec_note" in case
        out = I.apply(init, case["name"], arr, case["attrs"])
        np.testing.assert_array_equal(out.asnumpy(), np.full(case["shape"], SPEC_VALUES[case["id"]], np.float32))
    elif case["expect"] == "error":
        with pytest.raises(ValueError, match=case["name"]):
            I.apply(init, case["name"], arr, case["attrs"])
    else:
        out = I.apply(init, case["name"], arr, case["attrs"])
        assert out.dtype == np.float32 and out.shape == tuple(case["shape"])
        np.testing.assert_array_equal(out.asnumpy(), data["out"])
    np.testing.assert_array_equal(arr, before)


def _draws(case):
    R.seed(case["seed"])
    init = make(case["init"])
    zeros = np.zeros(case["shape"], np.float32)
    return [I.apply(init, case["name"], zeros).asnumpy().astype(np.float64)
            for _ in range(case["num_draws"])]


@pytest.mark.parametrize("case", CASES["stats"], ids=[c["id"] for c in CASES["stats"]])
def test_stats_case(case):
    draws = _draws(case)
    x = np.concatenate([d.ravel() for d in draws])
    n, th = x.size, case["theory"]
    assert n == case["empirical"]["num_samples"]
    mean, std = x.mean(), x.std()
    if case["distribution"] == "uniform":
        b = th["bound"]
        sigma = b / np.sqrt(3)
        assert np.abs(x).max() <= b * (1 + 1e-6)
        assert x.max() >= b * (1 - 2e-3) and x.min() <= -b * (1 - 2e-3)
        assert abs(mean) <= 5 * sigma / np.sqrt(n)
        assert abs(std / sigma - 1) <= 0.01
    elif case["distribution"] == "normal":
        sigma = th["std"]
        assert abs(mean) <= 5 * sigma / np.sqrt(n)
        assert abs(std / sigma - 1) <= 0.01
        assert np.abs(x).max() <= 7 * sigma
    else:
        scale, nout, nin = th["scale"], th["nout"], th["nin"]
        k = min(nout, nin)
        for d in draws:
            w = d.reshape(nout, nin)
            g = w @ w.T if nout <= nin else w.T @ w
            np.testing.assert_allclose(g, scale**2 * np.eye(k), rtol=0, atol=1e-5 * max(1, scale**2))
            np.testing.assert_allclose(np.linalg.norm(w), th["frobenius_norm"], rtol=1e-5)
        assert abs(std / th["entry_std"] - 1) <= 0.01


def test_seed_reproduces_every_stats_case_draw():
    case = CASES["stats"][0]
    a, b = _draws(case), _draws(case)
    assert all(np.array_equal(p, q) for p, q in zip(a, b))
