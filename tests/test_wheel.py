"""The package as users install it (issue #15): the release wheel is abi3 and tagged
manylinux2014 (glibc 2.17, through zig whatever this machine's glibc is), installs into a fresh
venv with no Rust toolchain on PATH and trains a model there; the sdist holds the sources.

The build is the one the README gives: ``maturin build --release --zig --compatibility
manylinux2014`` (``pip install ziglang`` provides zig; .ci/run installs it).
"""

import os
import shutil
import subprocess
import tarfile
import textwrap
import venv
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WHEEL_CMD = ["maturin", "build", "--release", "--zig", "--compatibility", "manylinux2014"]

TRAIN = textwrap.dedent("""
    import numpy as np
    import mxfn as mx
    from mxfn import module as m
    rs = np.random.RandomState(0)
    x = rs.rand(200, 4).astype(np.float32)
    y = (x[:, 0] > 0.5).astype(np.float32)
    net = mx.sym.softmax_output(mx.sym.fully_connected(mx.sym.variable("data"), num_hidden=2, name="fc"),
                                name="softmax")
    it = mx.io.ndarray_iter(x, label=y, batch_size=20)
    mod = m.fit(m.module(net), it, {"num_epoch": 20, "optimizer_params": {"learning_rate": 0.5}})
    print(mx.__file__)
    print(dict(m.score(mod, eval_data=it, eval_metric="acc"))["accuracy"])
""")


def _run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if shutil.which("maturin") is None:
        pytest.fail("maturin is not installed (.ci/run installs it)")
    out = tmp_path_factory.mktemp("dist")
    _run([*WHEEL_CMD, "-o", str(out)], cwd=ROOT)
    _run(["maturin", "sdist", "-o", str(out)], cwd=ROOT)
    return out


def test_the_wheel_is_abi3_and_manylinux2014(built):
    wheels = [f for f in os.listdir(built) if f.endswith(".whl")]
    assert len(wheels) == 1, wheels
    name = wheels[0]
    assert "-cp39-abi3-" in name and "manylinux_2_17_x86_64" in name, name
    with zipfile.ZipFile(built / name) as z:
        files = z.namelist()
        meta = z.read(next(f for f in files if f.endswith(".dist-info/METADATA"))).decode()
    assert any(f.startswith("mxfn/_native") for f in files)
    assert "Requires-Dist: numpy" in meta and "Classifier: Programming Language :: Rust" in meta


def test_the_wheel_trains_in_a_fresh_venv_without_rust(built, tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = str(env_dir / "bin" / "python")
    # No cargo, no rustc: only the venv and the system's basic tools.
    env = {"PATH": f"{env_dir / 'bin'}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}
    for tool in ("cargo", "rustc"):
        assert shutil.which(tool, path=env["PATH"]) is None
    wheel = next(built.glob("*.whl"))
    _run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)], env=env)
    r = _run([py, "-c", TRAIN], env=env, cwd=str(tmp_path))
    where, acc = r.stdout.split()
    assert where.startswith(str(env_dir)), where  # the installed package, not the source tree
    assert float(acc) > 0.9


def test_the_sdist_holds_the_sources(built):
    sdists = list(built.glob("*.tar.gz"))
    assert len(sdists) == 1, sdists
    with tarfile.open(sdists[0]) as t:
        names = t.getnames()
    for part in ("pyproject.toml", "Cargo.toml", "rust/core/src/lib.rs", "rust/py/src/lib.rs",
                 "pymod/mxfn/__init__.py", "README.md"):
        assert any(n.endswith(part) for n in names), part
