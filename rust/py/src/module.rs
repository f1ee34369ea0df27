//! Module bindings: `ModuleHandle` (a core `Module` behind a lock) and the calls
//! `mxfn.module` builds on. Batches cross as lists of NDArray handles; shapes as
//! `(name, shape, dtype, layout)` tuples.

use crate::error::{core, core_interruptible, lock, to_py};
use crate::io::IterHandle;
use crate::metric::MetricHandle;
use crate::nd::Handle;
use crate::optim::OptHandle;
use crate::sym::{monitor_through, SymHandle};
use mxfn_core::executor::GradReq;
use mxfn_core::initializer::Initializer;
use mxfn_core::io::{DataBatch, DataDesc};
use mxfn_core::module::{
    BindOptions, GradReqSpec, InitOptions, Module, ModuleOptions, OptimizerInit,
};
use mxfn_core::{Context, DType, NDArray};
use pyo3::prelude::*;
use pyo3::types::PyWeakrefReference;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};

/// A core Module. `mxfn.module` wraps it; calls release the GIL.
#[pyclass(frozen, module = "mxfn._native", name = "ModuleHandle")]
pub struct ModuleHandle {
    inner: Mutex<Module>,
}

impl ModuleHandle {
    /// The module (see [`lock`] for why this never deadlocks with the GIL).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Module> {
        lock(&self.inner)
    }
}

/// A desc as plain data: (name, shape, dtype name, layout).
type Desc = (String, Vec<usize>, String, Option<String>);

fn to_desc(d: &DataDesc) -> Desc {
    (
        d.name.clone(),
        d.shape.clone(),
        d.dtype.name().to_string(),
        d.layout.clone(),
    )
}

fn from_descs(ds: Vec<Desc>) -> PyResult<Vec<DataDesc>> {
    ds.into_iter()
        .map(|(name, shape, dtype, layout)| {
            let dt = DType::parse(&dtype).map_err(to_py)?;
            Ok(DataDesc {
                name,
                shape,
                dtype: dt,
                layout,
            })
        })
        .collect()
}

fn handles(v: Vec<NDArray>) -> Vec<Handle> {
    v.into_iter().map(|inner| Handle { inner }).collect()
}

fn arrays(v: &[PyRef<'_, Handle>]) -> Vec<NDArray> {
    v.iter().map(|a| a.inner.clone()).collect()
}

fn batch(data: &[PyRef<'_, Handle>], label: &[PyRef<'_, Handle>], pad: usize) -> DataBatch {
    DataBatch {
        data: arrays(data),
        label: arrays(label),
        pad,
        ..Default::default()
    }
}

fn param_map(m: Option<HashMap<String, PyRef<'_, Handle>>>) -> Option<BTreeMap<String, NDArray>> {
    m.map(|m| m.into_iter().map(|(k, v)| (k, v.inner.clone())).collect())
}

fn module_opts(
    data_names: Vec<String>,
    label_names: Vec<String>,
    contexts: Vec<(i32, i32)>,
    workload_list: Option<Vec<f64>>,
    fixed_param_names: Vec<String>,
) -> ModuleOptions {
    ModuleOptions {
        data_names,
        label_names,
        contexts: contexts
            .into_iter()
            .map(|(t, i)| Context {
                dev_type: t,
                dev_id: i,
            })
            .collect(),
        workload_list,
        fixed_param_names,
    }
}

#[pyfunction]
#[pyo3(signature = (sym, data_names, label_names, contexts, workload_list, fixed_param_names))]
fn mod_new(
    py: Python<'_>,
    sym: &SymHandle,
    data_names: Vec<String>,
    label_names: Vec<String>,
    contexts: Vec<(i32, i32)>,
    workload_list: Option<Vec<f64>>,
    fixed_param_names: Vec<String>,
) -> PyResult<ModuleHandle> {
    let s = sym.inner.clone();
    let o = module_opts(
        data_names,
        label_names,
        contexts,
        workload_list,
        fixed_param_names,
    );
    let m = core(py, "module", move || Module::new(s, o))?;
    Ok(ModuleHandle {
        inner: Mutex::new(m),
    })
}

#[pyfunction]
#[pyo3(signature = (prefix, epoch, data_names, label_names, contexts, workload_list, fixed_param_names))]
#[allow(clippy::too_many_arguments)]
fn mod_load(
    py: Python<'_>,
    prefix: String,
    epoch: usize,
    data_names: Vec<String>,
    label_names: Vec<String>,
    contexts: Vec<(i32, i32)>,
    workload_list: Option<Vec<f64>>,
    fixed_param_names: Vec<String>,
) -> PyResult<ModuleHandle> {
    let o = module_opts(
        data_names,
        label_names,
        contexts,
        workload_list,
        fixed_param_names,
    );
    let m = core(py, "module.load_checkpoint", move || {
        Module::load(&prefix, epoch, o)
    })?;
    Ok(ModuleHandle {
        inner: Mutex::new(m),
    })
}

/// (data_names, label_names, output_names, param_names, aux_names).
#[pyfunction]
#[allow(clippy::type_complexity)]
fn mod_names(
    h: &ModuleHandle,
) -> (
    Vec<String>,
    Vec<String>,
    Vec<String>,
    Vec<String>,
    Vec<String>,
) {
    let m = h.lock();
    (
        m.data_names().to_vec(),
        m.label_names().to_vec(),
        m.output_names().to_vec(),
        m.param_names().to_vec(),
        m.aux_names().to_vec(),
    )
}

/// (binded, params_initialized, optimizer_initialized, for_training).
#[pyfunction]
fn mod_state(h: &ModuleHandle) -> (bool, bool, bool, bool) {
    let m = h.lock();
    (
        m.binded(),
        m.params_initialized(),
        m.optimizer_initialized(),
        m.for_training(),
    )
}

#[pyfunction]
fn mod_symbol(h: &ModuleHandle) -> SymHandle {
    SymHandle {
        inner: h.lock().symbol().clone(),
    }
}

#[pyfunction]
fn mod_contexts(h: &ModuleHandle) -> Vec<(i32, i32)> {
    h.lock()
        .contexts()
        .iter()
        .map(|c| (c.dev_type, c.dev_id))
        .collect()
}

#[pyfunction]
fn mod_take_warnings(h: &ModuleHandle) -> Vec<String> {
    h.lock().take_warnings()
}

/// (data descs, label descs, output (name, shape) pairs).
#[pyfunction]
#[allow(clippy::type_complexity)]
fn mod_shapes(
    py: Python<'_>,
    h: &ModuleHandle,
) -> PyResult<(Vec<Desc>, Vec<Desc>, Vec<(String, Vec<usize>)>)> {
    core(py, "module.data_shapes", || {
        let m = h.lock();
        Ok((
            m.data_shapes()?.iter().map(to_desc).collect(),
            m.label_shapes()?.iter().map(to_desc).collect(),
            m.output_shapes()?,
        ))
    })
}

#[pyfunction]
#[pyo3(signature = (h, data_shapes, label_shapes, for_training, inputs_need_grad, force_rebind, grad_req))]
#[allow(clippy::too_many_arguments)]
fn mod_bind(
    py: Python<'_>,
    h: &ModuleHandle,
    data_shapes: Vec<Desc>,
    label_shapes: Vec<Desc>,
    for_training: bool,
    inputs_need_grad: bool,
    force_rebind: bool,
    grad_req: HashMap<String, String>,
) -> PyResult<()> {
    let data_shapes = from_descs(data_shapes)?;
    let label_shapes = from_descs(label_shapes)?;
    let grad_req = match grad_req.get("") {
        Some(r) => GradReqSpec::All(GradReq::parse(r).map_err(to_py)?),
        None => GradReqSpec::ByName(
            grad_req
                .iter()
                .map(|(k, v)| Ok((k.clone(), GradReq::parse(v)?)))
                .collect::<mxfn_core::Result<_>>()
                .map_err(to_py)?,
        ),
    };
    core(py, "module.bind", || {
        h.lock().bind(BindOptions {
            data_shapes,
            label_shapes,
            for_training,
            inputs_need_grad,
            force_rebind,
            grad_req,
        })
    })
}

#[pyfunction]
#[pyo3(signature = (h, init_spec, arg_params, aux_params, allow_missing, force_init, allow_extra, set))]
#[allow(clippy::too_many_arguments)]
fn mod_init_params(
    py: Python<'_>,
    h: &ModuleHandle,
    init_spec: Option<String>,
    arg_params: Option<HashMap<String, PyRef<'_, Handle>>>,
    aux_params: Option<HashMap<String, PyRef<'_, Handle>>>,
    allow_missing: bool,
    force_init: bool,
    allow_extra: bool,
    set: bool,
) -> PyResult<()> {
    let arg_params = param_map(arg_params);
    let aux_params = param_map(aux_params);
    let call = if set {
        "module.set_params"
    } else {
        "module.init_params"
    };
    core(py, call, || {
        let initializer = match init_spec {
            Some(s) => Some(Initializer::from_json(&s)?),
            None => None,
        };
        let o = InitOptions {
            initializer,
            arg_params,
            aux_params,
            allow_missing,
            force_init,
            allow_extra,
        };
        let mut m = h.lock();
        if set {
            m.set_params(o)
        } else {
            m.init_params(o)
        }
    })
}

/// (arg params, aux params) as (name, array) lists in the module's order.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn mod_get_params(
    py: Python<'_>,
    h: &ModuleHandle,
) -> PyResult<(Vec<(String, Handle)>, Vec<(String, Handle)>)> {
    core(py, "module.get_params", || {
        let m = h.lock();
        let (mut a, mut x) = m.get_params()?;
        let args = m
            .param_names()
            .iter()
            .filter_map(|n| a.remove(n).map(|v| (n.clone(), Handle { inner: v })))
            .collect();
        let aux = m
            .aux_names()
            .iter()
            .filter_map(|n| x.remove(n).map(|v| (n.clone(), Handle { inner: v })))
            .collect();
        Ok((args, aux))
    })
}

#[pyfunction]
fn mod_init_optimizer(
    py: Python<'_>,
    h: &ModuleHandle,
    opt: &OptHandle,
    reset_optimizer: bool,
    force_init: bool,
) -> PyResult<()> {
    let o = opt.inner.clone();
    core(py, "module.init_optimizer", || {
        h.lock().init_optimizer(
            o,
            OptimizerInit {
                reset_optimizer,
                force_init,
            },
        )
    })
}

#[pyfunction]
fn mod_optimizer(h: &ModuleHandle) -> Option<OptHandle> {
    h.lock().optimizer().map(|inner| OptHandle { inner })
}

#[pyfunction]
fn mod_borrow_optimizer(py: Python<'_>, h: &ModuleHandle, other: &ModuleHandle) -> PyResult<()> {
    if std::ptr::eq(h, other) {
        return Ok(());
    }
    core(py, "module.borrow_optimizer", || {
        let o = other.lock();
        h.lock().borrow_optimizer(&o)
    })
}

#[pyfunction]
#[pyo3(signature = (h, data, label, pad, is_train))]
fn mod_forward(
    py: Python<'_>,
    h: &ModuleHandle,
    data: Vec<PyRef<'_, Handle>>,
    label: Vec<PyRef<'_, Handle>>,
    pad: usize,
    is_train: Option<bool>,
) -> PyResult<()> {
    let batch = batch(&data, &label, pad);
    core(py, "module.forward", || h.lock().forward(&batch, is_train))
}

/// Forward (is_train=true) and backward in one call (a large pass enters the thread pool
/// once for both).
#[pyfunction]
fn mod_forward_backward(
    py: Python<'_>,
    h: &ModuleHandle,
    data: Vec<PyRef<'_, Handle>>,
    label: Vec<PyRef<'_, Handle>>,
    pad: usize,
) -> PyResult<()> {
    let batch = batch(&data, &label, pad);
    core(py, "module.forward_backward", || {
        h.lock().forward_backward(&batch)
    })
}

/// Prediction over a core iterator (reset first), the loop in the core: each batch's
/// outputs merged over devices without the padding (`merge`: the batches concatenated).
/// Ctrl-C stops it between batches with KeyboardInterrupt.
#[pyfunction]
#[pyo3(signature = (h, it, num_batch, merge))]
fn mod_predict(
    py: Python<'_>,
    h: &ModuleHandle,
    it: &IterHandle,
    num_batch: Option<usize>,
    merge: bool,
) -> PyResult<Vec<Vec<Handle>>> {
    let interrupt = Arc::new(AtomicBool::new(false));
    core_interruptible(py, "module.predict", interrupt.clone(), || {
        let mut m = h.lock();
        let mut it = it.lock();
        m.set_interrupt(Some(interrupt));
        let out = if merge {
            m.predict(&mut **it, num_batch).map(|o| vec![handles(o)])
        } else {
            m.predict_every_batch(&mut **it, num_batch)
                .map(|b| b.into_iter().map(handles).collect())
        };
        m.set_interrupt(None);
        out
    })
}

#[pyfunction]
fn mod_backward(
    py: Python<'_>,
    h: &ModuleHandle,
    out_grads: Vec<PyRef<'_, Handle>>,
) -> PyResult<()> {
    let g = arrays(&out_grads);
    core(py, "module.backward", || h.lock().backward(&g))
}

#[pyfunction]
fn mod_update(py: Python<'_>, h: &ModuleHandle) -> PyResult<()> {
    core(py, "module.update", || h.lock().update())
}

/// Accumulates a built-in metric on the last outputs (labels sliced per device in the core).
#[pyfunction]
fn mod_update_metric(
    py: Python<'_>,
    h: &ModuleHandle,
    metric: &MetricHandle,
    labels: Vec<PyRef<'_, Handle>>,
) -> PyResult<()> {
    let l = arrays(&labels);
    core(py, "module.update_metric", || {
        h.lock().update_metric(&mut metric.lock(), &l)
    })
}

/// The batch's labels cut into each device's slice (per device, per label).
#[pyfunction]
fn mod_device_labels(
    py: Python<'_>,
    h: &ModuleHandle,
    labels: Vec<PyRef<'_, Handle>>,
) -> PyResult<Vec<Vec<Handle>>> {
    let l = arrays(&labels);
    core(py, "module.update_metric", || {
        Ok(h.lock()
            .device_labels(&l)?
            .into_iter()
            .map(handles)
            .collect())
    })
}

/// Per output, per device.
#[pyfunction]
fn mod_outputs(py: Python<'_>, h: &ModuleHandle, merged: bool) -> PyResult<Vec<Vec<Handle>>> {
    core(py, "module.outputs", || {
        let m = h.lock();
        Ok(if merged {
            vec![handles(m.outputs_merged()?)]
        } else {
            m.outputs()?.into_iter().map(handles).collect()
        })
    })
}

#[pyfunction]
fn mod_input_grads(py: Python<'_>, h: &ModuleHandle, merged: bool) -> PyResult<Vec<Vec<Handle>>> {
    core(py, "module.input_grads", || {
        let m = h.lock();
        Ok(if merged {
            vec![handles(m.input_grads_merged()?)]
        } else {
            m.input_grads()?.into_iter().map(handles).collect()
        })
    })
}

#[pyfunction]
fn mod_grad_arrays(py: Python<'_>, h: &ModuleHandle) -> PyResult<Vec<Vec<Handle>>> {
    core(py, "module.grad_arrays", || {
        Ok(h.lock().grad_arrays()?.into_iter().map(handles).collect())
    })
}

#[pyfunction]
fn mod_monitored_arrays(py: Python<'_>, h: &ModuleHandle) -> PyResult<Vec<(String, Handle)>> {
    core(py, "module.monitored_arrays", || {
        Ok(h.lock()
            .monitored_arrays()?
            .into_iter()
            .map(|(n, a)| (n, Handle { inner: a }))
            .collect())
    })
}

#[pyfunction]
fn mod_reshape(
    py: Python<'_>,
    h: &ModuleHandle,
    data_shapes: Vec<Desc>,
    label_shapes: Vec<Desc>,
) -> PyResult<()> {
    let d = from_descs(data_shapes)?;
    let l = from_descs(label_shapes)?;
    core(py, "module.reshape", || h.lock().reshape(d, l))
}

#[pyfunction]
fn mod_save_checkpoint(
    py: Python<'_>,
    h: &ModuleHandle,
    prefix: String,
    epoch: usize,
) -> PyResult<()> {
    core(py, "module.save_checkpoint", || {
        h.lock().save_checkpoint(&prefix, epoch)
    })
}

#[pyfunction]
fn mod_load_params(py: Python<'_>, h: &ModuleHandle, path: std::path::PathBuf) -> PyResult<()> {
    core(py, "module.load_params", || h.lock().load_params(&path))
}

#[pyfunction]
fn mod_save_params(py: Python<'_>, h: &ModuleHandle, path: std::path::PathBuf) -> PyResult<()> {
    core(py, "module.save_params", || h.lock().save_params(&path))
}

/// Writes the optimizer states as MXNet's `.states` pickle (atomically).
#[pyfunction]
fn mod_save_states(py: Python<'_>, h: &ModuleHandle, path: std::path::PathBuf) -> PyResult<()> {
    core(py, "module.save_optimizer_states", || {
        h.lock().save_optimizer_states(&path)
    })
}

/// Reads a `.states` file (restricted reader); the states apply now or at init_optimizer.
#[pyfunction]
fn mod_load_states(py: Python<'_>, h: &ModuleHandle, path: std::path::PathBuf) -> PyResult<()> {
    core(py, "module.load_optimizer_states", || {
        h.lock().load_optimizer_states(&path)
    })
}

/// Installs `f(name, array_handle)` as the monitor of every executor (None removes it), held
/// weakly: the Python module keeps `f` alive (see `sym::weak_monitor`). The callback takes the GIL while the pass holds the module's lock; that cannot deadlock because
/// no binding waits for a module lock while holding the GIL ([`lock`]).
#[pyfunction]
#[pyo3(signature = (h, f))]
fn mod_set_monitor(py: Python<'_>, h: &ModuleHandle, f: Option<PyObject>) -> PyResult<()> {
    let factory = match f {
        Some(f) => {
            // Only a weak reference is held (see `weak_monitor`); the caller keeps `f` alive.
            let weak = Arc::new(PyWeakrefReference::new(f.bind(py))?.unbind());
            Some(Arc::new(move || monitor_through(weak.clone()))
                as mxfn_core::module::MonitorFactory)
        }
        None => None,
    };
    h.lock().install_monitor(factory);
    Ok(())
}

/// Registers the module functions on `mxfn._native`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ModuleHandle>()?;
    m.add_function(wrap_pyfunction!(mod_new, m)?)?;
    m.add_function(wrap_pyfunction!(mod_load, m)?)?;
    m.add_function(wrap_pyfunction!(mod_names, m)?)?;
    m.add_function(wrap_pyfunction!(mod_state, m)?)?;
    m.add_function(wrap_pyfunction!(mod_symbol, m)?)?;
    m.add_function(wrap_pyfunction!(mod_contexts, m)?)?;
    m.add_function(wrap_pyfunction!(mod_take_warnings, m)?)?;
    m.add_function(wrap_pyfunction!(mod_shapes, m)?)?;
    m.add_function(wrap_pyfunction!(mod_bind, m)?)?;
    m.add_function(wrap_pyfunction!(mod_init_params, m)?)?;
    m.add_function(wrap_pyfunction!(mod_get_params, m)?)?;
    m.add_function(wrap_pyfunction!(mod_init_optimizer, m)?)?;
    m.add_function(wrap_pyfunction!(mod_optimizer, m)?)?;
    m.add_function(wrap_pyfunction!(mod_borrow_optimizer, m)?)?;
    m.add_function(wrap_pyfunction!(mod_forward, m)?)?;
    m.add_function(wrap_pyfunction!(mod_backward, m)?)?;
    m.add_function(wrap_pyfunction!(mod_forward_backward, m)?)?;
    m.add_function(wrap_pyfunction!(mod_predict, m)?)?;
    m.add_function(wrap_pyfunction!(mod_update, m)?)?;
    m.add_function(wrap_pyfunction!(mod_outputs, m)?)?;
    m.add_function(wrap_pyfunction!(mod_update_metric, m)?)?;
    m.add_function(wrap_pyfunction!(mod_device_labels, m)?)?;
    m.add_function(wrap_pyfunction!(mod_input_grads, m)?)?;
    m.add_function(wrap_pyfunction!(mod_grad_arrays, m)?)?;
    m.add_function(wrap_pyfunction!(mod_monitored_arrays, m)?)?;
    m.add_function(wrap_pyfunction!(mod_reshape, m)?)?;
    m.add_function(wrap_pyfunction!(mod_save_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(mod_load_params, m)?)?;
    m.add_function(wrap_pyfunction!(mod_save_params, m)?)?;
    m.add_function(wrap_pyfunction!(mod_save_states, m)?)?;
    m.add_function(wrap_pyfunction!(mod_load_states, m)?)?;
    m.add_function(wrap_pyfunction!(mod_set_monitor, m)?)?;
    Ok(())
}
