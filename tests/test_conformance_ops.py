"""The recorded MXNet 1.9.1 operator cases, run through mx.sym.load_json and mx.executor:
forward outputs, gradients and auxiliary states at each case's tolerance; every case's
symbol also round-trips through to_json / load_json."""

import json

import numpy as np
import pytest

import mxfn as mx

from conftest import conformance_dir

OPS = conformance_dir() / "ops"
CASES = json.loads((OPS / "cases.json").read_text())


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_operator_case(case):
    sym = mx.sym.load_json(case["symbol"])
    data = np.load(OPS / f"{case['id']}.npz")
    rtol, atol = case["rtol"], case["atol"]
    args = {n: data[f"arg:{n}"] for n in sym.list_arguments()}
    aux = {n: data[f"aux:{n}"] for n in sym.list_auxiliary_states()}
    req = case["grad_req"] if case["backward"] else "null"
    if isinstance(req, dict):
        req = {n: req.get(n, "write") for n in sym.list_arguments()}
    exe = mx.executor.bind(sym, mx.cpu(), args, grad_req=req, aux_states=aux or None)
    mx.executor.forward(exe, is_train=case["is_train"])
    outs = mx.executor.outputs(exe)
    for i, o in enumerate(outs):
        np.testing.assert_allclose(o.asnumpy(), data[f"out:{i}"], rtol=rtol, atol=atol, err_msg=f"out:{i}")
    if not case["backward"]:
        return
    heads = [data[f"head_grad:{i}"] for i in range(len(outs)) if f"head_grad:{i}" in data]
    mx.executor.backward(exe, heads or None)
    grads = mx.executor.grad_dict(exe)
    for n in sym.list_arguments():
        if f"grad:{n}" in data:
            np.testing.assert_allclose(grads[n].asnumpy(), data[f"grad:{n}"], rtol=rtol, atol=atol, err_msg=f"grad:{n}")
    aux_after = mx.executor.aux_dict(exe)
    for n in sym.list_auxiliary_states():
        if f"aux_after:{n}" in data:
            np.testing.assert_allclose(aux_after[n].asnumpy(), data[f"aux_after:{n}"], rtol=rtol, atol=atol,
                                       err_msg=f"aux_after:{n}")


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_symbol_json_round_trips(case):
    sym = mx.sym.load_json(case["symbol"])
    assert mx.sym.to_json(sym) == case["symbol"]
    assert mx.sym.to_json(mx.sym.load_json(mx.sym.to_json(sym))) == case["symbol"]
