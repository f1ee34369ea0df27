"""The type information shipped with mxfn: the ``_native.pyi`` stub matches the built
extension (names, parameter names, defaults), the option TypedDicts of ``mxfn._types`` have
exactly the keys of the option specs they mirror, ``mxfn.curried`` declares what it builds,
and a type checker run on user code sees the package's types (py.typed, the stub)."""

import ast
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

import mxfn
from mxfn import _batch, _bucketing, _fit, _module, _native, _types, curried, optimizer

PKG = pathlib.Path(mxfn.__file__).resolve().parent
STUB = PKG / "_native.pyi"
# Parameter names that are Python keywords in the extension are spelled with a trailing "_".
KEYWORD_PARAMS = {"global_": "global"}


def _stub():
    """(functions, classes) of the stub: name -> ast node; classes name -> (node, methods)."""
    tree = ast.parse(STUB.read_text(), str(STUB))
    functions, classes, values = {}, {}, set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            functions[node.name] = node
        elif isinstance(node, ast.ClassDef):
            methods = {n.name: n for n in node.body if isinstance(n, ast.FunctionDef)}
            bases = {getattr(b, "id", None) for b in node.bases}
            classes[node.name] = (node, methods, bases)
        elif (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
              and getattr(node.annotation, "id", None) != "TypeAlias"):
            values.add(node.target.id)  # a module value (type aliases are stub-only)
    return functions, classes, values


def _stub_params(fn, method=False):
    """[(name, has_default)] of a stub function, ``self`` left out, keywords mapped back."""
    a = fn.args
    params = [*a.posonlyargs, *a.args]
    defaults = [False] * (len(params) - len(a.defaults)) + [True] * len(a.defaults)
    out = [(KEYWORD_PARAMS.get(p.arg, p.arg), d) for p, d in zip(params, defaults)]
    return out[1:] if method else out


def _runtime_params(obj):
    """[(name, has_default)] from the extension's ``__text_signature__`` (read by hand:
    ``inspect.signature`` refuses a parameter named ``global``)."""
    text = obj.__text_signature__.strip()[1:-1]
    params = [p.strip() for p in text.split(",") if p.strip()]
    return [(p.split("=")[0].strip(), "=" in p) for p in params
            if p not in ("/", "*") and not p.startswith("$")]


def _helper(bases):
    """Stub-only typing helpers (TypedDicts, Protocols) that the extension does not define."""
    return bool(bases & {"TypedDict", "Protocol"})


def test_the_stub_names_every_public_name_of_the_extension_and_nothing_else():
    functions, classes, values = _stub()
    declared = set(functions) | {n for n, (_, _, b) in classes.items() if not _helper(b)} | values
    runtime = {n for n in dir(_native) if not n.startswith("__")} | {"__version__"}
    assert sorted(runtime - declared) == [], "in the extension, missing from _native.pyi"
    assert sorted(declared - runtime) == [], "in _native.pyi, not in the extension"


def test_stub_functions_have_the_extensions_parameters():
    functions, _, _ = _stub()
    wrong = {name: (_stub_params(fn), _runtime_params(getattr(_native, name)))
             for name, fn in functions.items()
             if _stub_params(fn) != _runtime_params(getattr(_native, name))}
    assert wrong == {}


def test_stub_classes_have_the_extensions_methods_and_parameters():
    _, classes, _ = _stub()
    for name, (_, methods, bases) in classes.items():
        if _helper(bases):
            continue
        cls = getattr(_native, name)
        runtime = {m for m in vars(cls) if not m.startswith("__")}
        assert {m for m in methods if not m.startswith("__")} == runtime, name
        if "__new__" in methods:  # a constructor (#[new]): its parameters after cls
            assert _stub_params(methods["__new__"], method=True) == \
                _runtime_params(cls), f"{name}()"
        for m, fn in methods.items():
            if m.startswith("__"):
                continue
            assert _stub_params(fn, method=True) == _runtime_params(getattr(cls, m)), f"{name}.{m}"


def test_the_stub_checks_can_fail():
    # The helpers above on made-up input: a renamed or missing parameter is seen.
    fn = ast.parse("def f(a, b=None, /): ...").body[0]
    assert _stub_params(fn) == [("a", False), ("b", True)]
    assert _runtime_params(_native.nd_argmax) == [("a", False), ("axis", True), ("keepdims", True)]
    assert _stub_params(ast.parse("def nd_argmax(a, axis): ...").body[0]) != \
        _runtime_params(_native.nd_argmax)


def test_the_package_ships_its_types():
    assert (PKG / "py.typed").is_file()
    assert STUB.is_file()


# Each TypedDict of mxfn._types and the option spec it mirrors.
OPTION_MAPS = [
    (_types.ModuleOptions, _module._MODULE_OPTS),
    (_types.BucketingModuleOptions, _bucketing._BUCKETING_OPTS),
    (_types.BindOptions, _module._BIND_OPTS),
    (_types.InitParamsOptions, _module._INIT_OPTS),
    (_types.SetParamsOptions, _module._SET_OPTS),
    (_types.InitOptimizerOptions, _module._OPT_OPTS),
    (_types.SaveCheckpointOptions, _module._SAVE_OPTS),
    (_types.LoadCheckpointOptions, _module._LOAD_OPTS),
    (_types.FitParamsOptions, _fit.FIT_PARAMS_OPTS),
    (_types.FitOptions, _fit.FIT_OPTS),
    (_types.ScoreOptions, _fit.SCORE_OPTS),
    (_types.PredictOptions, _fit.PREDICT_OPTS),
    (_types.PredictEveryBatchOptions, _fit._EVERY_BATCH_OPTS),
    (_types.DataDescOptions, _batch._DESC_OPTS),
    (_types.DataBatchOptions, _batch._BATCH_OPTS),
    (_types.OptimizerParams, {k: s for spec in optimizer._SPECS.values() for k, s in spec.items()}),
]


@pytest.mark.parametrize("td, spec", OPTION_MAPS, ids=[td.__name__ for td, _ in OPTION_MAPS])
def test_option_typeddicts_have_the_keys_of_their_spec(td, spec):
    keys = td.__required_keys__ | td.__optional_keys__
    assert sorted(keys) == sorted(spec)
    assert td.__required_keys__ == frozenset()  # every key may be left out (defaults)


def test_every_option_typeddict_is_checked():
    tds = {n for n in _types.__all__ if isinstance(getattr(_types, n), type)}
    assert tds == {td.__name__ for td, _ in OPTION_MAPS}


def test_curried_declares_what_it_builds():
    tree = ast.parse((PKG / "curried.py").read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If)
                 and getattr(n.test, "id", None) == "TYPE_CHECKING")
    declared = {n.target.id for n in block.body if isinstance(n, ast.AnnAssign)}
    imported = {a.asname or a.name for n in block.body if isinstance(n, ast.ImportFrom)
                for a in n.names}
    assert declared == set(curried.MODULE_FIRST)
    assert imported == set(curried.NO_MODULE)


USER_CODE = '''
import numpy as np
import mxfn as mx
from mxfn import _types

x = mx.nd.zeros((2, 3))
shape: tuple[int, ...] = x.shape
fc = mx.sym.fully_connected(mx.sym.variable("data"), num_hidden=4, name="fc")
args: list[str] = fc.list_arguments()
opt = mx.optimizer.adam({"learning_rate": 0.01, "beta1": 0.9})
w, state = mx.optimizer.update(opt, 0, np.ones(3), np.ones(3), mx.optimizer.create_state(opt, 0, np.ones(3)))
acc = mx.metric.update(mx.metric.accuracy(), [np.zeros(2)], [np.zeros((2, 2))])
name: str = mx.metric.name(acc)
fit_opts: _types.FitOptions = {"num_epoch": 2, "begin_epoch": 0}
'''


@pytest.mark.skipif(shutil.which("mypy") is None and
                    subprocess.run([sys.executable, "-m", "mypy", "--version"],
                                   capture_output=True).returncode != 0,
                    reason="mypy is not installed (.ci/run installs it)")
def test_a_type_checker_sees_mxfns_types_in_user_code(tmp_path):
    good = tmp_path / "good.py"
    good.write_text(textwrap.dedent(USER_CODE))
    bad = tmp_path / "bad.py"
    bad.write_text(textwrap.dedent(USER_CODE) + textwrap.dedent('''
        n: int = x.shape                                   # a tuple, not an int
        s: str = fc.list_arguments()                       # a list
        bad_opts: _types.FitOptions = {"num_epoch": "2"}   # a str for an int
        mx.nd.zeros((2, 3)).no_such_method()
    '''))

    def mypy(path):
        return subprocess.run(
            [sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent",
             "--python-version", "3.10", "--ignore-missing-imports", str(path)],
            capture_output=True, text=True, cwd=tmp_path)

    ok = mypy(good)
    assert ok.returncode == 0, ok.stdout
    failed = mypy(bad)
    assert failed.returncode == 1
    for line in (16, 17, 18, 19):
        assert f"bad.py:{line}: error" in failed.stdout, failed.stdout
