"""Tests for mxfn._opts: key normalisation, merging, the order of checks, types, defaults, docs."""

import copy
import fractions
import pickle
import re
from collections.abc import Mapping

import pytest

from mxfn._errors import MXFNError
from mxfn._maps import FrozenMap
from mxfn._opts import REQUIRED, OptSpec, doc_options, normalize_key, opt, parse_opts

BIND = {
    "data_shapes": opt(REQUIRED, (list, tuple), "shapes of the data inputs"),
    "label_shapes": opt(None, (list, tuple), "shapes of the labels"),
    "for_training": opt(True, bool, "whether gradients will be computed"),
    "grad_req": opt("write", (str, Mapping), "gradient request"),
}
CKPT = {
    "prefix": opt(REQUIRED, str, "file name prefix"),
    "epoch": opt(REQUIRED, int, "epoch number"),
    "save_opt_states": opt(False, bool, "save optimizer states",
                           aliases=("save_optimizer_states",)),
    "batch_size": opt(32, int, "samples per batch", aliases=("data_batch_size",)),
    "learning_rate": opt(0.01, float, "step size"),
    "callback": opt(None, None, "anything"),
}
SHAPES = [("data", (4, 8))]


@pytest.mark.parametrize("key, expected", [
    ("data_shapes", "data_shapes"),
    ("data-shapes", "data_shapes"),
    ("for-training", "for_training"),
    ("auxParams", "aux_params"),
    ("dataNames", "data_names"),
    ("labelNames", "label_names"),
    ("forTraining", "for_training"),
    ("DataShapes", "data_shapes"),
    ("data-Shapes", "data_shapes"),
    ("param_idx2name", "param_idx2name"),
    ("lr2Mult", "lr2_mult"),
    ("HTTPServer", "http_server"),
    ("top_k", "top_k"),
    ("epoch", "epoch"),
])
def test_normalize_key(key, expected):
    assert normalize_key(key) == expected


def test_defaults_filled_in_spec_order():
    o = parse_opts("module.bind", BIND, {"data_shapes": SHAPES})
    assert isinstance(o, FrozenMap)
    assert list(o) == list(BIND)
    assert o == {"data_shapes": SHAPES, "label_shapes": None, "for_training": True,
                 "grad_req": "write"}


def test_result_is_read_only():
    o = parse_opts("module.bind", BIND, kw={"data_shapes": SHAPES})
    with pytest.raises(TypeError):
        o["for_training"] = False


@pytest.mark.parametrize("opts, kw", [
    ({"data_shapes": SHAPES, "for_training": False}, None),
    (None, {"data_shapes": SHAPES, "for_training": False}),
    ({"data_shapes": SHAPES}, {"for_training": False}),
    ({"data-shapes": SHAPES, "for-training": False}, None),
    ({"dataShapes": SHAPES}, {"forTraining": False}),
    (FrozenMap({"data_shapes": SHAPES}), {"for_training": False}),
    ({"data_shapes": SHAPES, "for_training": True}, {"for_training": False}),
    ({"data_shapes": SHAPES, "for-training": True}, {"forTraining": False}),
], ids=["map", "keywords", "both", "kebab", "camel", "frozen-map", "keyword-wins",
        "keyword-wins-across-spellings"])
def test_map_and_keywords_merge(opts, kw):
    o = parse_opts("module.bind", BIND, opts, kw)
    assert o["data_shapes"] == SHAPES and o["for_training"] is False


@pytest.mark.parametrize("opts, key, expected", [
    ({"save_optimizer_states": True}, "save_opt_states", True),
    ({"save-optimizer-states": True}, "save_opt_states", True),
    ({"saveOptimizerStates": True}, "save_opt_states", True),
    ({"data_batch_size": 8}, "batch_size", 8),
    ({"data-batch-size": 8}, "batch_size", 8),
])
def test_aliases_map_to_canonical_key(opts, key, expected):
    o = parse_opts("module.save_checkpoint", CKPT, opts, {"prefix": "p", "epoch": 1})
    assert o[key] == expected
    assert set(o) == set(CKPT)


def test_keyword_wins_over_alias_in_map():
    o = parse_opts("f", CKPT, {"prefix": "p", "epoch": 1, "save_optimizer_states": True},
                   {"save_opt_states": False})
    assert o["save_opt_states"] is False


@pytest.mark.parametrize("opts, first, second", [
    ({"data-shapes": SHAPES, "data_shapes": SHAPES}, "data-shapes", "data_shapes"),
    ({"dataShapes": SHAPES, "data_shapes": SHAPES}, "dataShapes", "data_shapes"),
])
def test_two_spellings_in_one_map(opts, first, second):
    msg = f'module.bind: option "data_shapes" given twice, as "{first}" and "{second}"'
    with pytest.raises(MXFNError, match=re.escape(msg)):
        parse_opts("module.bind", BIND, opts)


def test_canonical_and_alias_in_one_map():
    msg = ('f: option "save_opt_states" given twice, '
           'as "save_opt_states" and "save_optimizer_states"')
    with pytest.raises(MXFNError, match=re.escape(msg)):
        parse_opts("f", CKPT, {"prefix": "p", "epoch": 1, "save_opt_states": True,
                               "save_optimizer_states": False})


def test_two_spellings_in_keywords():
    with pytest.raises(MXFNError, match='given twice, as "forTraining" and "for_training"'):
        parse_opts("module.bind", BIND, None, {"data_shapes": SHAPES, "forTraining": True,
                                               "for_training": False})


@pytest.mark.parametrize("fname, spec, opts, msg", [
    ("module.bind", BIND, {"data_shape": SHAPES},
     'module.bind: unknown option "data_shape"; did you mean "data_shapes"?'),
    ("module.bind", BIND, {"dataShape": SHAPES},
     'module.bind: unknown option "dataShape"; did you mean "data_shapes"?'),
    ("module.bind", BIND, {"data_shapes": SHAPES, "for_trainin": True},
     'module.bind: unknown option "for_trainin"; did you mean "for_training"?'),
    ("module.bind", BIND, {"data_shapes": SHAPES, "zzz": 1},
     'module.bind: unknown option "zzz"; valid options are "data_shapes", "label_shapes", '
     '"for_training" and "grad_req"'),
    ("f", {"shape_a": opt(0), "shape_b": opt(0)}, {"shape_c": 1},
     'f: unknown option "shape_c"; did you mean "shape_a" or "shape_b"?'),
    ("f", CKPT, {"save_optimizer_state": True},
     'f: unknown option "save_optimizer_state"; did you mean "save_optimizer_states"?'),
    ("g", {}, {"x": 1}, 'g: unknown option "x"; g takes no options'),
], ids=["typo", "camel-typo", "one-of-many", "no-close-match", "two-suggestions",
        "alias-suggested", "no-options"])
def test_unknown_option_messages(fname, spec, opts, msg):
    with pytest.raises(MXFNError) as err:
        parse_opts(fname, spec, opts)
    assert str(err.value) == msg


def test_unknown_keyword():
    with pytest.raises(MXFNError, match='unknown option "data_shape"; did you mean "data_shapes"'):
        parse_opts("module.bind", BIND, None, {"data_shape": SHAPES})


@pytest.mark.parametrize("opts, kw, error, fragment", [
    ({"bogus": 1}, None, MXFNError, 'unknown option "bogus"'),
    ({"epoch": "not an int"}, {"bogus": 1}, MXFNError, 'unknown option "bogus"'),
    ({"prefix": "p"}, None, MXFNError, 'missing required option "epoch"'),
    ({"prefix": "p", "epoch": "x"}, None, TypeError, 'option "epoch" expects int'),
    ({"epoch": "x"}, None, MXFNError, 'missing required option "prefix"'),
], ids=["unknown", "unknown-before-type", "missing", "type", "missing-before-type"])
def test_order_of_checks(opts, kw, error, fragment):
    with pytest.raises(error, match=re.escape(fragment)):
        parse_opts("module.save_checkpoint", CKPT, opts, kw)


def test_missing_required_message():
    with pytest.raises(MXFNError) as err:
        parse_opts("module.bind", BIND, {"for_training": False})
    assert str(err.value) == 'module.bind: missing required option "data_shapes"'


@pytest.mark.parametrize("key, value, expected", [
    ("epoch", "3", "int"),
    ("epoch", 3.0, "int"),
    ("epoch", True, "int"),
    ("epoch", None, "int"),
    ("learning_rate", "0.1", "float"),
    ("learning_rate", False, "float"),
    ("save_opt_states", 1, "bool"),
    ("save_opt_states", None, "bool"),
    ("prefix", 7, "str"),
])
def test_type_errors(key, value, expected):
    opts = {"prefix": "p", "epoch": 1, key: value}
    msg = (f'module.save_checkpoint: option "{key}" expects {expected}, '
           f"got {type(value).__name__} {value!r}")
    with pytest.raises(TypeError) as err:
        parse_opts("module.save_checkpoint", CKPT, opts)
    assert str(err.value) == msg
    assert not isinstance(err.value, MXFNError)


def test_type_error_lists_every_accepted_type():
    with pytest.raises(TypeError) as err:
        parse_opts("module.bind", BIND, {"data_shapes": SHAPES, "label_shapes": 3})
    assert str(err.value) == ('module.bind: option "label_shapes" expects list or tuple or None, '
                              'got int 3')


def test_type_error_shortens_long_values():
    with pytest.raises(TypeError) as err:
        parse_opts("f", CKPT, {"prefix": "p", "epoch": list(range(1000))})
    assert len(str(err.value)) < 200


@pytest.mark.parametrize("key, value", [
    ("epoch", 0),
    ("learning_rate", 1),
    ("learning_rate", 0.5),
    ("learning_rate", fractions.Fraction(1, 2)),
    ("save_opt_states", True),
    ("callback", None),
    ("callback", print),
    ("callback", [1, 2]),
])
def test_accepted_values(key, value):
    o = parse_opts("f", CKPT, {"prefix": "p", "epoch": 1, key: value})
    assert o[key] is value


@pytest.mark.parametrize("opts", [
    {"data_shapes": SHAPES, "label_shapes": None},
    {"data_shapes": SHAPES, "grad_req": {"fc1_weight": "null"}},
    {"data_shapes": tuple(SHAPES), "grad_req": FrozenMap({"w": "add"})},
])
def test_none_and_abstract_types(opts):
    assert parse_opts("module.bind", BIND, opts)["data_shapes"] == opts["data_shapes"]


def test_numpy_scalars_pass_as_numbers():
    np = pytest.importorskip("numpy")
    opts = {"prefix": "p", "epoch": np.int64(2), "learning_rate": np.float32(0.5)}
    o = parse_opts("f", CKPT, opts)
    assert o["epoch"] == 2 and o["learning_rate"] == 0.5


@pytest.mark.parametrize("bad", [[("data_shapes", SHAPES)], "data_shapes", 3])
def test_non_mapping_options(bad):
    msg = ("module.bind: options must be a mapping (such as a dict) or None, "
           f"got {type(bad).__name__}")
    with pytest.raises(TypeError, match=re.escape(msg)):
        parse_opts("module.bind", BIND, bad)


def test_non_string_key():
    msg = "module.bind: option names must be strings, got int 1"
    with pytest.raises(TypeError, match=re.escape(msg)):
        parse_opts("module.bind", BIND, {1: SHAPES})


def test_inputs_not_mutated():
    opts = {"data-shapes": [("data", [4, 8])], "grad_req": {"w": "add"}}
    kw = {"forTraining": False}
    before = copy.deepcopy((opts, kw, BIND))
    parse_opts("module.bind", BIND, opts, kw)
    assert (opts, kw, BIND) == before


@pytest.mark.parametrize("roundtrip", [copy.copy, copy.deepcopy,
                                       lambda x: pickle.loads(pickle.dumps(x))],
                         ids=["copy", "deepcopy", "pickle"])
def test_required_survives_copies(roundtrip):
    assert roundtrip(REQUIRED) is REQUIRED
    with pytest.raises(MXFNError, match='missing required option "data_shapes"'):
        parse_opts("module.bind", roundtrip(BIND), {})


def test_opt_builds_spec():
    s = opt(REQUIRED, int, "count", aliases="n")
    assert s == OptSpec(REQUIRED, (int,), "count", ("n",))
    assert opt(None).types is None
    assert opt(1, (int, float), aliases=("numItems",)).aliases == ("num_items",)
    assert repr(REQUIRED) == "REQUIRED"


@pytest.mark.parametrize("types", ["int", (int, "float"), [int]])
def test_opt_rejects_non_types(types):
    with pytest.raises(TypeError, match="opt: types must be types"):
        opt(0, types)


def test_spec_is_immutable():
    with pytest.raises(AttributeError):
        opt(0, int).default = 1


def test_doc_options():
    expected = "\n".join([
        "Options:",
        "    prefix (str, required): file name prefix",
        "    epoch (int, required): epoch number",
        "    save_opt_states (bool, default False): save optimizer states; "
        'also accepted as "save_optimizer_states"',
        "    batch_size (int, default 32): samples per batch; "
        'also accepted as "data_batch_size"',
        "    learning_rate (float, default 0.01): step size",
        "    callback (any, default None): anything",
    ])
    assert doc_options(CKPT) == expected


def test_doc_options_indent_and_every_key():
    text = doc_options(BIND, indent=4)
    lines = text.splitlines()
    assert lines[0] == "    Options:"
    assert all(line.startswith("        ") for line in lines[1:])
    assert [line.split()[0] for line in lines[1:]] == list(BIND)
    assert "grad_req (str or Mapping, default 'write'): gradient request" in text
