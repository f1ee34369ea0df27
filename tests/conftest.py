"""Shared pytest fixtures: where the conformance data and the MXNet peer live."""

import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def conformance_dir() -> pathlib.Path:
    """The recorded MXNet 1.9.1 cases: $MXFN_CONFORMANCE_DIR, else the repo's copy."""
    env = os.environ.get("MXFN_CONFORMANCE_DIR")
    return pathlib.Path(env) if env else ROOT / "tests" / "data" / "conformance"


MXNET_PYTHON = ROOT / ".venv-peers" / "mxnet" / "bin" / "python"


@pytest.fixture(scope="session")
def mxnet_python():
    """A function running Python code under the real MXNet 1.9.1 and returning its stdout.

    The venv comes from shared/bench/setup_peers.sh (CI makes it). Without it the test is
    skipped locally, but fails under CI=true: compatibility must be proven there.
    """
    if not MXNET_PYTHON.exists():
        if os.environ.get("CI"):
            pytest.fail(f"MXNet peer venv missing at {MXNET_PYTHON}; run setup_peers.sh mxnet")
        pytest.skip("MXNet 1.9.1 venv not found (.venv-peers/mxnet); run setup_peers.sh mxnet")

    def run(code: str) -> str:
        out = subprocess.run([str(MXNET_PYTHON), "-c", code], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, f"MXNet failed:\n{out.stderr[-3000:]}"
        return out.stdout

    return run
