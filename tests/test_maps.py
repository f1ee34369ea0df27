"""Tests for mxfn._maps: FrozenMap reads like a dict, refuses writes, and works with toolz."""

import copy
import operator
import pickle

import pytest
import toolz

from mxfn._maps import FrozenMap, frozen


def test_reads_like_a_dict():
    m = FrozenMap({"a": 1, "b": [2]})
    assert m["a"] == 1
    assert m.get("z") is None and m.get("z", 5) == 5
    assert "a" in m and "z" not in m
    assert len(m) == 2
    assert list(m) == ["a", "b"]
    assert list(m.items()) == [("a", 1), ("b", [2])]
    with pytest.raises(KeyError):
        m["z"]


@pytest.mark.parametrize("args, kw, expected", [
    ((), {}, {}),
    (({"a": 1},), {}, {"a": 1}),
    (([("a", 1), ("b", 2)],), {}, {"a": 1, "b": 2}),
    (({"a": 1},), {"b": 2}, {"a": 1, "b": 2}),
    ((), {"items": 3}, {"items": 3}),
])
def test_built_like_dict(args, kw, expected):
    assert FrozenMap(*args, **kw) == expected


def test_holds_its_own_copy():
    source = {"a": 1}
    m = FrozenMap(source)
    source["a"] = 2
    source["b"] = 3
    assert m == {"a": 1}


@pytest.mark.parametrize("write", [
    lambda m: operator.setitem(m, "a", 2),
    lambda m: operator.setitem(m, "new", 2),
    lambda m: operator.delitem(m, "a"),
    lambda m: setattr(m, "a", 2),
    lambda m: setattr(m, "_d", {}),
    lambda m: delattr(m, "_d"),
], ids=["set-existing", "set-new", "del-item", "set-attr", "set-internal", "del-internal"])
def test_writes_raise_type_error(write):
    m = FrozenMap({"a": 1})
    with pytest.raises(TypeError):
        write(m)
    assert m == {"a": 1}


@pytest.mark.parametrize("method", ["update", "pop", "popitem", "clear", "setdefault"])
def test_has_no_mutating_methods(method):
    assert not hasattr(FrozenMap(), method)


@pytest.mark.parametrize("items", [{}, {"a": 1}, {"a": 1, "b": (2, 3), "c": None}])
def test_repr_and_equality_like_dict(items):
    m = FrozenMap(items)
    assert repr(m) == repr(items)
    assert m == items and items == m
    assert m == FrozenMap(items)
    assert not (m != items)


@pytest.mark.parametrize("other", [{"a": 2}, {"a": 1, "b": 2}, {}, [("a", 1)], None])
def test_unequal(other):
    assert FrozenMap({"a": 1}) != other


@pytest.mark.parametrize("roundtrip", [
    lambda m: pickle.loads(pickle.dumps(m)),
    copy.copy,
    copy.deepcopy,
], ids=["pickle", "copy", "deepcopy"])
def test_copies_stay_frozen(roundtrip):
    m = FrozenMap({"a": 1, "b": [2]})
    c = roundtrip(m)
    assert isinstance(c, FrozenMap) and c == m
    with pytest.raises(TypeError):
        c["a"] = 5


@pytest.mark.parametrize("call, expected", [
    (lambda m: toolz.assoc(m, "c", 3), {"a": 1, "b": 2, "c": 3}),
    (lambda m: toolz.assoc(m, "a", 9), {"a": 9, "b": 2}),
    (lambda m: toolz.merge(m, {"b": 5, "d": 4}), {"a": 1, "b": 5, "d": 4}),
    (lambda m: toolz.merge({"z": 0}, m), {"z": 0, "a": 1, "b": 2}),
    (lambda m: toolz.dissoc(m, "a"), {"b": 2}),
    (lambda m: toolz.assoc_in(m, ["n", "x"], 1), {"a": 1, "b": 2, "n": {"x": 1}}),
    (lambda m: toolz.update_in(m, ["a"], lambda v: v + 1), {"a": 2, "b": 2}),
    (lambda m: toolz.valmap(str, m), {"a": "1", "b": "2"}),
    (lambda m: toolz.thread_first(m, (toolz.assoc, "c", 3), (toolz.dissoc, "a")),
     {"b": 2, "c": 3}),
], ids=["assoc-new", "assoc-existing", "merge", "merge-into", "dissoc", "assoc_in",
        "update_in", "valmap", "thread_first"])
def test_toolz_returns_new_plain_dicts(call, expected):
    m = FrozenMap({"a": 1, "b": 2})
    out = call(m)
    assert type(out) is dict
    assert out == expected
    assert m == {"a": 1, "b": 2}


@pytest.mark.parametrize("given, expected", [
    (None, {}),
    ({}, {}),
    ({"x": 1}, {"x": 1}),
    (FrozenMap({"y": 2}), {"y": 2}),
])
def test_frozen(given, expected):
    out = frozen(given)
    assert isinstance(out, FrozenMap)
    assert out == expected


def test_frozen_returns_a_frozen_map_as_is():
    m = FrozenMap({"x": 1})
    assert frozen(m) is m


@pytest.mark.parametrize("bad", [[("x", 1)], "x", 3])
def test_frozen_rejects_non_mappings(bad):
    msg = f"frozen: expected a mapping or None, got {type(bad).__name__}"
    with pytest.raises(TypeError, match=msg):
        frozen(bad)
