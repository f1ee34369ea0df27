"""The one place mxfn touches the ``onnx`` package (an optional dependency, ``mxfn[onnx]``):
turns the plain-data graph of ``_graph.Graph`` into a ModelProto and writes it atomically."""

from __future__ import annotations

import logging
import os

from collections.abc import Sequence
from typing import Any, Union

import numpy as np

from .. import _native
from .._errors import MXFNError
from ._graph import Graph

try:  # optional: mxfn imports without it, export_model says how to get it
    import onnx
    from onnx import helper, numpy_helper
except ImportError:  # pragma: no cover - exercised only where onnx is absent
    onnx = None  # type: ignore[assignment]

_LOG = logging.getLogger("mxfn")


def require() -> None:
    """Raises ImportError (with the install command) when the onnx package is missing."""
    if onnx is None:
        raise ImportError("mx.onnx.export_model needs the onnx package: "
                          "pip install 'mxfn[onnx]' (or pip install 'onnx>=1.14')")


def max_opset() -> int:
    """The newest ONNX opset the installed onnx package knows."""
    require()
    return onnx.defs.onnx_opset_version()


def elem_type(dtype: Any) -> int:
    """The ONNX TensorProto element type of a numpy dtype."""
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _attr(value: Any) -> Any:
    """Attribute values: numpy arrays become TensorProtos, numpy dtypes (Cast's ``to``) ONNX
    element types, the rest goes to make_node as is."""
    if isinstance(value, np.dtype):
        return elem_type(value)
    if isinstance(value, np.ndarray):
        return numpy_helper.from_array(value)
    return value


def build_model(g: Graph, graph_inputs: Sequence[tuple], graph_outputs: Sequence[tuple],
                producer_version: str) -> Any:
    """The ModelProto of graph ``g``.

    ``graph_inputs`` / ``graph_outputs`` are ``(name, dtype, dims)`` with None for a dynamic
    axis. The IR version is the oldest one that carries the opset, so older runtimes load the
    file too.
    """
    require()
    nodes = [helper.make_node(op, ins, outs, name=outs[0], **{k: _attr(v) for k, v in attrs.items()})
             for op, ins, outs, attrs in g.onnx_nodes]
    # np.ascontiguousarray would turn a 0-d constant into shape (1,); np.require keeps the rank.
    inits = [numpy_helper.from_array(np.require(arr, requirements="C"), name) for name, arr in g.initializers.items()]
    vi = [helper.make_tensor_value_info(n, elem_type(t), list(d)) for n, t, d in graph_inputs]
    vo = [helper.make_tensor_value_info(n, elem_type(t), list(d)) for n, t, d in graph_outputs]
    graph = helper.make_graph(nodes, "mxfn_converted_model", vi, vo, inits)
    opset = [helper.make_opsetid("", g.opset)]
    model = helper.make_model(graph, opset_imports=opset, producer_name="mxfn",
                              producer_version=str(producer_version))
    model.ir_version = helper.find_min_ir_version_for(opset)
    return model


def shape_inference(model: Any) -> Any:
    """ONNX shape inference over ``model``; like MXNet's exporter, a failure keeps the model
    as it is (and is logged)."""
    try:
        return onnx.shape_inference.infer_shapes(model)
    except Exception as e:  # noqa: BLE001 - onnx raises several unrelated types here
        _LOG.info("onnx: shape inference failed (%s); the model is written without it", e)
        return model


def write(model: Any, path: Union[str, os.PathLike]) -> str:
    """Serialises ``model`` to ``path`` through the core's one atomic writer (a new temporary
    file in the same directory, never opened through a planted link, the mode of the file it
    replaces, ``fsync``, rename): a failure never leaves a torn model."""
    data = model.SerializeToString()
    if len(data) >= 2 ** 31:
        raise MXFNError("onnx.export_model: the model is larger than 2 GB, protobuf's limit")
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"onnx.export_model: directory {folder!r} does not exist "
                                f"(onnx_file_path={path!r})")
    _native.write_file_atomic(path, data)
    return path
