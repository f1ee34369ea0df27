"""The documentation site (mkdocs.yml, docs/): it builds with ``mkdocs build --strict``, the
API reference covers ``mx.module``, the Module migration page covers every public function of
``mxfn.module``, and the code on the pages is real: the ``python`` blocks of the guides run
top to bottom (``py`` blocks are MXNet's code, shown for comparison, not run), the ``pycon``
blocks of the REPL tour pass as doctests, and the excerpts of the examples and of the Rust
crate are still in the files they were copied from (files that ``cargo test`` compiles)."""

import contextlib
import doctest
import importlib.util
import io
import logging
import os
import pathlib
import re
import subprocess
import sys

import pytest

import mxfn
import mxfn.module

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
HAVE_MKDOCS = all(importlib.util.find_spec(p) is not None
                  for p in ("mkdocs", "mkdocstrings", "mkdocstrings_handlers.python"))
needs_mkdocs = pytest.mark.skipif(
    not HAVE_MKDOCS, reason="mkdocs and mkdocstrings[python] are not installed (.ci/run installs them)")


def _blocks(page, lang):
    """The fenced code blocks of ``docs/<page>`` in language ``lang``, in order."""
    text = (DOCS / page).read_text()
    return re.findall(rf"^```{lang}\n(.*?)^```$", text, re.S | re.M)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                        "-d", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return out


@needs_mkdocs
def test_the_site_builds_strictly(site):
    for page in ("index.html", "getting-started/index.html", "migration/index.html", "tour/index.html",
                 "examples/index.html", "rust/index.html", "api/module/index.html"):
        assert (site / page).is_file(), page


@needs_mkdocs
def test_the_api_reference_documents_every_function_of_mx_module(site):
    html = (site / "api" / "module" / "index.html").read_text()
    documented = set(re.findall(r'id="mxfn\._(?:module|bucketing|fit)\.(\w+)"', html))
    # An alias (params = get_params) is documented under the name of the function it is.
    missing = [n for n in mxfn.module.__all__
               if n not in documented and getattr(mxfn.module, n).__name__ not in documented]
    assert missing == []


def _unmentioned(text, names, module):
    """The public names of ``module`` that ``text`` never calls as ``m.<name>`` (classes: by name)."""
    out = []
    for n in names:
        pattern = rf"\b{n}\b" if isinstance(getattr(module, n), type) else rf"\bm\.{n}\b"
        if not re.search(pattern, text):
            out.append(n)
    return out


def test_the_migration_page_covers_every_public_function_of_mxfn_module():
    text = (DOCS / "migration.md").read_text()
    assert _unmentioned(text, mxfn.module.__all__, mxfn.module) == []


def test_the_coverage_check_can_fail():
    assert _unmentioned("m.bind(mod) and m.binded(mod)", ["bind", "binded", "fit"], mxfn.module) == ["fit"]
    assert _unmentioned("m.module(net)", ["Module"], mxfn.module) == ["Module"]


@contextlib.contextmanager
def _in_repo_root():
    """The guides use repository paths (data/mnist); their logging set-up is undone after."""
    log = logging.getLogger("mxfn")
    handlers, level, cwd = list(log.handlers), log.level, os.getcwd()
    os.chdir(ROOT)
    try:
        yield
    finally:
        os.chdir(cwd)
        log.handlers[:] = handlers
        log.setLevel(level)


@pytest.mark.parametrize("page", ["index.md", "getting-started.md", "migration.md"])
def test_the_python_code_of_the_guides_runs(page):
    blocks = _blocks(page, "python")
    assert blocks, f"{page} has no python blocks"
    ns = {"__name__": f"docs_{page}"}
    out = io.StringIO()
    with _in_repo_root(), contextlib.redirect_stdout(out):
        for i, code in enumerate(blocks):
            exec(compile(code, f"docs/{page} (python block {i + 1})", "exec"), ns)
    if page == "getting-started.md":
        assert 'unknown option "num_epochs"; did you mean "num_epoch"?' in out.getvalue()
        assert ns["probs"].shape == (10000, 10)
    if page == "migration.md":
        assert "[('softmax_output', (8, 3))]" in out.getvalue()


def test_the_repl_tour_passes_as_doctests():
    blocks = _blocks("tour.md", "pycon")
    assert len(blocks) >= 5
    test = doctest.DocTestParser().get_doctest("\n".join(blocks), {}, "docs/tour.md", "docs/tour.md", 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    out = io.StringIO()
    runner.run(test, out=out.write)
    assert runner.failures == 0, out.getvalue()
    assert runner.tries == len(test.examples) > 30


def test_the_example_excerpts_are_in_the_examples():
    sources = "\n".join(p.read_text() for p in (ROOT / "examples").glob("*.py"))
    blocks = _blocks("examples.md", "python")
    assert len(blocks) >= 3
    for code in blocks:
        assert code in sources, code


def test_the_examples_page_names_every_example():
    text = (DOCS / "examples.md").read_text()
    assert [p.name for p in sorted((ROOT / "examples").glob("*.py")) if f"examples/{p.name}" not in text] == []


def test_the_rust_code_is_copied_from_the_compiled_example():
    source = (ROOT / "rust" / "core" / "examples" / "mnist_mlp.rs").read_text()
    blocks = _blocks("rust.md", "rust")
    assert len(blocks) >= 4
    for code in blocks:
        assert code in source, code
