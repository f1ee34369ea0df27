"""The recorded MXNet 1.9.1 learning-rate scheduler cases (tests/data/conformance/sched):
one scheduler per case, called with each recorded num_update in order (the stateful cases
query out of order), compared at the case's tolerances."""

import json

import numpy as np
import pytest

from mxfn import lr_scheduler as sched

from conftest import conformance_dir

CASES = json.loads((conformance_dir() / "sched" / "cases.json").read_text())
BUILD = {"FactorScheduler": sched.factor_scheduler,
         "MultiFactorScheduler": sched.multifactor_scheduler,
         "PolyScheduler": sched.poly_scheduler,
         "CosineScheduler": sched.cosine_scheduler}


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_scheduler_case(case):
    s = BUILD[case["class"]](case["kwargs"])
    got = [s(n) for n in case["num_updates"]]
    np.testing.assert_allclose(got, case["lrs"], rtol=case["rtol"], atol=case["atol"])


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_scheduler_case_from_effective_kwargs(case):
    # The MXNet class names work too, and spelling every default out changes nothing.
    s = getattr(sched, case["class"])(**case["effective_kwargs"])
    got = [s(n) for n in case["num_updates"]]
    np.testing.assert_allclose(got, case["lrs"], rtol=case["rtol"], atol=case["atol"])
