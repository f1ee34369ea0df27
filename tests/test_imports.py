"""The package's import graph: module-level imports only, and no cycle among them. A cycle
would be paid for with imports hidden inside functions, which this test also refuses."""

import ast
import pathlib

PKG = pathlib.Path(__file__).resolve().parent.parent / "pymod" / "mxfn"


def _targets(node, module):
    """The mxfn modules an import statement names (relative or absolute)."""
    if isinstance(node, ast.ImportFrom):
        if node.level == 1:
            if node.module:  # from .x import y
                return [node.module.split(".")[0]]
            return [a.name.split(".")[0] for a in node.names]  # from . import x, y
        if node.module and (node.module == "mxfn" or node.module.startswith("mxfn.")):
            parts = node.module.split(".")
            return [parts[1]] if len(parts) > 1 else [a.name for a in node.names]
    if isinstance(node, ast.Import):
        return [a.name.split(".")[1] for a in node.names if a.name.startswith("mxfn.")]
    return []


def _graph():
    graph, nested = {}, []
    for path in sorted(PKG.glob("*.py")):
        name = path.stem
        tree = ast.parse(path.read_text(), str(path))
        top = set()
        for node in tree.body:
            top.update(t for t in _targets(node, name) if (PKG / f"{t}.py").exists())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                for inner in ast.walk(node):
                    if [t for t in _targets(inner, name) if (PKG / f"{t}.py").exists()]:
                        nested.append(f"{name}.py:{inner.lineno}")
        graph[name] = top - {name}
    return graph, nested


def _cycle(graph):
    """One import cycle as a list of module names, or None."""
    state = {}

    def visit(n, path):
        state[n] = "open"
        for m in sorted(graph.get(n, ())):
            if state.get(m) == "open":
                return path[path.index(m):] + [m]
            if m not in state:
                found = visit(m, path + [m])
                if found:
                    return found
        state[n] = "done"
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n, [n])
            if found:
                return found
    return None


def test_no_import_cycle_among_the_package_modules():
    graph, _ = _graph()
    assert graph["module"] >= {"_module", "_fit"}  # the walk sees the real imports
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_no_package_import_inside_functions():
    _, nested = _graph()
    assert nested == []


def test_the_checks_find_a_cycle_and_a_nested_import():
    # The same functions on a made-up graph and source: they can fail.
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    tree = ast.parse("def f():\n    from . import module\n")
    inner = tree.body[0].body[0]
    assert _targets(inner, "x") == ["module"]


def test_one_version_source():
    from importlib import metadata

    import mxfn
    from mxfn import _native
    # The Cargo.toml version reaches the metadata (maturin) and the extension alike.
    assert mxfn.__version__ == _native.__version__
    assert metadata.version("mxfn") == mxfn.__version__
