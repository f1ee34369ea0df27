"""Shared type aliases, and the option maps of the Module API as ``TypedDict`` s.

Type information only: nothing here is called at run time, and this module imports no other
mxfn module at run time (the names it refers to are imported for type checkers alone).

The TypedDicts list each function's canonical option keys with their types, so an editor
completes ``m.fit(mod, train, {"num_e…``. Every one is ``total=False`` (each key may be
left out; the function fills its default). Option functions take
``FitOptions | Mapping[str, Any]``: a plain mapping is still accepted, for the kebab-case
and camelCase spellings that are normalised on input. ``tests/test_types.py`` checks that
each TypedDict has exactly the keys of the option spec it mirrors.

    >>> fit_opts: FitOptions = {"num_epoch": 2, "optimizer": "adam"}
    >>> sorted(fit_opts)
    ['num_epoch', 'optimizer']
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict, Union

import numpy as np

if TYPE_CHECKING:
    from ._batch import DataBatch, DataDesc, DataIter
    from .callback import BatchEndParam
    from .context import Context
    from .initializer import Initializer, Load, Mixed
    from .kvstore import KVStore
    from .lr_scheduler import LRScheduler
    from .metric import CompositeMetric, CustomMetric, EvalMetric
    from .monitor import Monitor
    from .ndarray import NDArray
    from .optimizer import Optimizer
    from .symbol import Symbol

__all__ = [
    "ArrayLike", "Shape", "DTypeLike", "ContextLike", "PathLike", "Options", "DescLike",
    "BatchLike", "DataSource", "InitializerLike", "MetricLike", "Metric", "OptimizerLike",
    "SchedulerLike", "BatchEndCallback", "EpochEndCallback", "Callbacks",
    "ModuleOptions", "BucketingModuleOptions", "BindOptions", "InitParamsOptions",
    "SetParamsOptions", "InitOptimizerOptions", "OptimizerParams", "FitParamsOptions",
    "FitOptions", "ScoreOptions", "PredictEveryBatchOptions", "PredictOptions",
    "SaveCheckpointOptions", "LoadCheckpointOptions", "DataDescOptions", "DataBatchOptions",
]

# -- aliases --------------------------------------------------------------------------------

#: An array argument: an NDArray, a numpy array, nested lists or a scalar.
ArrayLike = Union["NDArray", "np.ndarray[Any, Any]", Sequence[Any], float, int]
#: A shape: a tuple of ints (a list is accepted).
Shape = Sequence[int]
#: A dtype: a name such as ``"float32"``, a numpy dtype or a numpy scalar type.
DTypeLike = Union[str, "np.dtype[Any]", type]
#: A device: a Context, a name such as ``"cpu(1)"``, or None (the current context).
ContextLike = Union["Context", str, None]
#: A file name.
PathLike = Union[str, "os.PathLike[str]"]
#: An option map in any accepted spelling (snake_case, kebab-case, camelCase).
Options = Mapping[str, Any]
#: An input description: a DataDesc, a map with ``name`` and ``shape``, or ``(name, shape)``.
DescLike = Union["DataDesc", Mapping[str, Any], tuple[str, Sequence[int]]]
#: A batch: a DataBatch or a map with ``data`` (and optionally ``label``, ``pad``, …).
BatchLike = Union["DataBatch", Mapping[str, Any]]
#: What ``score`` and ``predict`` evaluate: an iterator, or arrays batched with the bound size.
DataSource = Union["DataIter", Iterator[Any], "NDArray", "np.ndarray[Any, Any]", Sequence[Any]]
#: An initializer value, a name (``"xavier"``) or MXNet's JSON spec.
InitializerLike = Union["Initializer", "Mixed", "Load", str]
#: A metric value.
Metric = Union["EvalMetric", "CustomMetric", "CompositeMetric"]
#: What ``eval_metric.create`` takes: a metric, a name, a function or a list of those.
MetricLike = Union["EvalMetric", "CustomMetric", "CompositeMetric", str, Callable[..., Any],
                   Sequence[Any]]
#: An optimizer value or a name (``"sgd"``, ``"adam"``, …).
OptimizerLike = Union["Optimizer", str]
#: A learning-rate scheduler, or any callable ``num_update -> lr``.
SchedulerLike = Union["LRScheduler", Callable[[int], float]]
#: ``f(BatchEndParam)``, called after a batch.
BatchEndCallback = Callable[["BatchEndParam"], Any]
#: ``f(epoch, symbol, arg_params, aux_params)``, called after an epoch.
EpochEndCallback = Callable[[int, "Symbol", dict[str, "NDArray"], dict[str, "NDArray"]], Any]
#: One callback or a list of them (None: none).
Callbacks = Union[Callable[..., Any], Sequence[Callable[..., Any]], None]

_Params = Union[Mapping[str, "ArrayLike"], None]


# -- mx.module ------------------------------------------------------------------------------

class ModuleOptions(TypedDict, total=False):
    """Options of ``module.module``."""

    data_names: Sequence[str]
    label_names: Union[Sequence[str], None]
    contexts: Union["Context", Sequence["Context"], None]
    workload_list: Union[Sequence[float], None]
    fixed_param_names: Union[Sequence[str], None]


class BucketingModuleOptions(TypedDict, total=False):
    """Options of ``module.bucketing_module``."""

    default_bucket_key: Any
    contexts: Union["Context", Sequence["Context"], None]
    workload_list: Union[Sequence[float], None]
    fixed_param_names: Union[Sequence[str], None]


class BindOptions(TypedDict, total=False):
    """Options of ``module.bind``."""

    data_shapes: Union[Sequence[DescLike], Mapping[str, Any]]
    label_shapes: Union[Sequence[DescLike], Mapping[str, Any], None]
    for_training: bool
    inputs_need_grad: bool
    force_rebind: bool
    shared_module: Any
    grad_req: Union[str, Mapping[str, str]]


class InitParamsOptions(TypedDict, total=False):
    """Options of ``module.init_params``."""

    initializer: Union[InitializerLike, None]
    arg_params: _Params
    aux_params: _Params
    allow_missing: bool
    force_init: bool
    allow_extra: bool


class SetParamsOptions(TypedDict, total=False):
    """Options of ``module.set_params``."""

    arg_params: Mapping[str, ArrayLike]
    aux_params: _Params
    allow_missing: bool
    force_init: bool
    allow_extra: bool


class OptimizerParams(TypedDict, total=False):
    """The options of the optimizers (``optimizer_params`` of ``init_optimizer`` and ``fit``):
    the common ones and every optimizer's own; each optimizer rejects keys it does not take."""

    learning_rate: Union[float, None]
    wd: float
    rescale_grad: float
    clip_gradient: Union[float, None]
    lr_scheduler: Union[SchedulerLike, None]
    begin_num_update: int
    param_idx2name: Union[Mapping[int, str], None]
    sym: Any
    lr_mult: Union[Mapping[str, float], None]
    wd_mult: Union[Mapping[str, float], None]
    multi_precision: bool
    momentum: float
    lazy_update: bool
    wd_lh: float
    lamda: float
    beta1: float
    beta2: float
    epsilon: float
    schedule_decay: float
    eps: float
    gamma1: float
    gamma2: float
    centered: bool
    clip_weights: Union[float, None]
    rho: float
    lamda1: float
    beta: float


class InitOptimizerOptions(TypedDict, total=False):
    """Options of ``module.init_optimizer``."""

    kvstore: Union[str, "KVStore", None]
    optimizer: OptimizerLike
    optimizer_params: Union[OptimizerParams, Mapping[str, Any], None]
    reset_optimizer: bool
    force_init: bool


class FitParamsOptions(TypedDict, total=False):
    """Options of ``module.fit_params`` (also accepted directly by ``fit``)."""

    eval_metric: MetricLike
    validation_metric: Union[MetricLike, None]
    kvstore: Union[str, "KVStore", None]
    optimizer: OptimizerLike
    optimizer_params: Union[OptimizerParams, Mapping[str, Any]]
    initializer: Union[InitializerLike, None]
    arg_params: _Params
    aux_params: _Params
    allow_missing: bool
    force_rebind: bool
    force_init: bool
    begin_epoch: int
    monitor: Union["Monitor", None]
    batch_end_callback: Callbacks
    epoch_end_callback: Callbacks
    eval_end_callback: Callbacks
    eval_batch_end_callback: Callbacks
    rank0_reports: bool


class FitOptions(FitParamsOptions, total=False):
    """Options of ``module.fit``: its own and every ``fit_params`` key."""

    train_data: Any
    eval_data: Any
    num_epoch: int
    fit_params: Union[FitParamsOptions, Mapping[str, Any], None]


class ScoreOptions(TypedDict, total=False):
    """Options of ``module.score``."""

    eval_data: DataSource
    eval_metric: MetricLike
    num_batch: Union[int, None]
    batch_end_callback: Callbacks
    score_end_callback: Callbacks
    reset: bool
    epoch: int


class PredictEveryBatchOptions(TypedDict, total=False):
    """Options of ``module.predict_every_batch``."""

    eval_data: DataSource
    num_batch: Union[int, None]
    reset: bool


class PredictOptions(PredictEveryBatchOptions, total=False):
    """Options of ``module.predict``."""

    merge_batches: bool


class SaveCheckpointOptions(TypedDict, total=False):
    """Options of ``module.save_checkpoint``."""

    prefix: str
    epoch: int
    save_opt_states: bool


class LoadCheckpointOptions(ModuleOptions, total=False):
    """Options of ``module.load_checkpoint``."""

    prefix: str
    epoch: int
    load_optimizer_states: bool


# -- mx.io ----------------------------------------------------------------------------------

class DataDescOptions(TypedDict, total=False):
    """Keys of ``io.data_desc``'s map form."""

    name: str
    shape: Shape
    dtype: DTypeLike
    layout: Union[str, None]


class DataBatchOptions(TypedDict, total=False):
    """Options of ``io.data_batch``."""

    data: Any
    label: Any
    pad: int
    index: Any
    bucket_key: Any
    provide_data: Union[Sequence[DescLike], None]
    provide_label: Union[Sequence[DescLike], None]
