//! Symbol, executor and operator-registry bindings: what `mxfn.sym`, `mxfn.executor` and
//! the generated `mxfn.nd` operator functions build on.

use crate::error::{core, mxfn_err, to_py};
use crate::nd::Handle;
use mxfn_core::executor::{Executor, GradReq};
use mxfn_core::ops::{self, ParamKind};
use mxfn_core::symbol::{self, json, InferredShapes, Symbol};
use mxfn_core::{Context, DType, NDArray};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::types::{PyWeakrefMethods, PyWeakrefReference};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;

/// One node as Python sees it: (op name, node name, attrs, [(input node, output index)]).
type NodeInfo = (
    String,
    String,
    BTreeMap<String, String>,
    Vec<(usize, usize)>,
);

/// A handle to a core Symbol (immutable).
#[pyclass(frozen, module = "mxfn._native", name = "SymbolHandle")]
#[derive(Clone)]
pub struct SymHandle {
    pub inner: Symbol,
}

fn s(inner: Symbol) -> SymHandle {
    SymHandle { inner }
}

fn nd(inner: NDArray) -> Handle {
    Handle { inner }
}

#[pymethods]
impl SymHandle {
    fn list_arguments(&self) -> Vec<String> {
        self.inner.list_arguments()
    }
    fn list_outputs(&self) -> Vec<String> {
        self.inner.list_outputs()
    }
    fn list_auxiliary_states(&self) -> Vec<String> {
        self.inner.list_auxiliary_states()
    }
    fn list_inputs(&self) -> Vec<String> {
        self.inner.list_inputs()
    }
    fn num_outputs(&self) -> usize {
        self.inner.heads.len()
    }
    fn name(&self) -> Option<String> {
        self.inner.name()
    }
    fn attr(&self, key: &str) -> Option<String> {
        self.inner.attr(key)
    }
    fn attr_dict(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        self.inner.attr_dict()
    }
    fn output(&self, i: usize) -> PyResult<SymHandle> {
        self.inner.output(i).map(s).map_err(to_py)
    }
    fn output_by_name(&self, name: &str) -> PyResult<SymHandle> {
        self.inner.output_by_name(name).map(s).map_err(to_py)
    }
    fn get_internals(&self) -> SymHandle {
        s(self.inner.get_internals())
    }
    fn to_json(&self) -> String {
        json::to_json(&self.inner)
    }
    /// Per node, in topological order: (op name, node name, attrs, [(input node index, output index)]).
    fn nodes(&self) -> Vec<NodeInfo> {
        let nodes = self.inner.topo_nodes();
        let index: HashMap<usize, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (std::sync::Arc::as_ptr(n) as usize, i))
            .collect();
        nodes
            .iter()
            .map(|n| {
                let ins = n
                    .inputs
                    .iter()
                    .map(|e| (index[&(std::sync::Arc::as_ptr(&e.node) as usize)], e.index))
                    .collect();
                (
                    n.op_name().to_string(),
                    n.name.clone(),
                    n.attrs.clone(),
                    ins,
                )
            })
            .collect()
    }
    /// Output shapes by node output name for every internal output, given input shapes.
    fn infer_shape(
        &self,
        py: Python<'_>,
        shapes: HashMap<String, Vec<usize>>,
    ) -> PyResult<InferredShapes> {
        let sym = self.inner.clone();
        core(py, "sym.infer_shape", move || sym.infer_shape(&shapes))
    }
    fn infer_type(
        &self,
        py: Python<'_>,
        types: HashMap<String, String>,
    ) -> PyResult<(Vec<String>, Vec<String>, Vec<String>)> {
        let mut known = HashMap::new();
        for (k, v) in types {
            known.insert(k, DType::parse(&v).map_err(to_py)?);
        }
        let sym = self.inner.clone();
        let (a, o, x) = core(py, "sym.infer_type", move || sym.infer_type(&known))?;
        let names = |v: Vec<DType>| v.into_iter().map(|d| d.name().to_string()).collect();
        Ok((names(a), names(o), names(x)))
    }
}

#[pyfunction]
fn sym_variable(name: &str, attrs: BTreeMap<String, String>) -> SymHandle {
    s(Symbol::variable_with_attrs(name, attrs))
}

/// Composes an operator; `name` None means an automatic name from `hint`.
#[pyfunction]
#[pyo3(signature = (op, name, hint, attrs, inputs))]
fn sym_create(
    py: Python<'_>,
    op: &str,
    name: Option<String>,
    hint: Option<String>,
    attrs: BTreeMap<String, String>,
    inputs: Vec<(Option<String>, PyRef<'_, SymHandle>)>,
) -> PyResult<SymHandle> {
    let inputs: Vec<(Option<String>, Symbol)> = inputs
        .into_iter()
        .map(|(k, v)| (k, v.inner.clone()))
        .collect();
    let name = match (name, hint) {
        (Some(n), _) => Some(n),
        (None, Some(h)) => Some(symbol::auto_name(&h)),
        (None, None) => None,
    };
    let op = op.to_string();
    core(py, "sym.create", move || {
        Symbol::compose(&op, name.as_deref(), attrs, inputs).map(s)
    })
}

#[pyfunction]
fn sym_group(symbols: Vec<PyRef<'_, SymHandle>>) -> SymHandle {
    let v: Vec<Symbol> = symbols.iter().map(|x| x.inner.clone()).collect();
    s(Symbol::group(&v))
}

#[pyfunction]
fn sym_load_json(py: Python<'_>, text: String) -> PyResult<SymHandle> {
    core(py, "sym.load_json", move || json::load_json(&text).map(s))
}

#[pyfunction]
fn sym_save(py: Python<'_>, sym: &SymHandle, path: PathBuf) -> PyResult<()> {
    let sym = sym.inner.clone();
    core(py, "sym.save", move || json::save(&sym, &path))
}

#[pyfunction]
fn sym_load(py: Python<'_>, path: PathBuf) -> PyResult<SymHandle> {
    core(py, "sym.load", move || json::load(&path).map(s))
}

#[pyfunction]
fn sym_reset_names() {
    symbol::reset_auto_names()
}

/// Starts a fresh automatic-name scope on this thread (MXNet's `with NameManager():`).
#[pyfunction]
fn sym_enter_name_scope() {
    symbol::enter_name_scope()
}

/// Returns to the enclosing automatic-name scope.
#[pyfunction]
fn sym_exit_name_scope() {
    symbol::exit_name_scope()
}

fn kind_name(k: &ParamKind) -> String {
    k.describe()
}

/// The registry: one dict per op (name, python name, aliases, doc, params, variadic).
#[pyfunction]
fn op_list(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for def in ops::registry().values() {
        if !seen.insert(def.name) {
            continue;
        }
        let d = PyDict::new(py);
        d.set_item("name", def.name)?;
        d.set_item("py_name", def.python_name())?;
        d.set_item("aliases", def.aliases.to_vec())?;
        d.set_item("doc", def.doc)?;
        let params: Vec<(&str, String, Option<&str>, &str)> = def
            .params
            .iter()
            .map(|p| (p.name, kind_name(&p.kind), p.default, p.doc))
            .collect();
        d.set_item("params", params)?;
        d.set_item("variadic", def.variadic)?;
        out.push(d);
    }
    Ok(out)
}

/// Runs an operator imperatively on arrays; returns its visible outputs.
#[pyfunction]
fn op_invoke(
    py: Python<'_>,
    op: String,
    attrs: BTreeMap<String, String>,
    inputs: Vec<(Option<String>, PyRef<'_, Handle>)>,
) -> PyResult<Vec<Handle>> {
    let inputs: Vec<(Option<String>, NDArray)> = inputs
        .into_iter()
        .map(|(k, v)| (k, v.inner.clone()))
        .collect();
    let outs = core(py, &format!("nd.{op}"), move || {
        ops::invoke(&op, attrs, inputs)
    })?;
    Ok(outs.into_iter().map(nd).collect())
}

/// A bound executor. Methods take the lock for their duration; the monitor callback runs
/// Python code with the GIL re-acquired.
#[pyclass(module = "mxfn._native", name = "ExecutorHandle")]
pub struct ExeHandle {
    inner: Mutex<Executor>,
}

fn lock(e: &ExeHandle) -> std::sync::MutexGuard<'_, Executor> {
    crate::error::lock(&e.inner)
}

fn parse_req(r: &str) -> PyResult<GradReq> {
    GradReq::parse(r).map_err(to_py)
}

#[pyfunction]
#[pyo3(signature = (sym, ctx, args, grads, reqs, aux))]
fn exe_bind(
    py: Python<'_>,
    sym: &SymHandle,
    ctx: (i32, i32),
    args: Vec<PyRef<'_, Handle>>,
    grads: Vec<Option<PyRef<'_, Handle>>>,
    reqs: Vec<String>,
    aux: Vec<PyRef<'_, Handle>>,
) -> PyResult<ExeHandle> {
    let args: Vec<NDArray> = args.iter().map(|a| a.inner.clone()).collect();
    let grads: Vec<Option<NDArray>> = grads
        .iter()
        .map(|g| g.as_ref().map(|g| g.inner.clone()))
        .collect();
    let reqs = reqs
        .iter()
        .map(|r| parse_req(r))
        .collect::<PyResult<Vec<_>>>()?;
    let aux: Vec<NDArray> = aux.iter().map(|a| a.inner.clone()).collect();
    let sym = sym.inner.clone();
    let exe = core(py, "executor.bind", move || {
        Executor::bind(
            &sym,
            Context {
                dev_type: ctx.0,
                dev_id: ctx.1,
            },
            args,
            grads,
            reqs,
            aux,
        )
    })?;
    Ok(ExeHandle {
        inner: Mutex::new(exe),
    })
}

#[pyfunction]
#[pyo3(signature = (sym, ctx, shapes, dtypes, reqs, default_req))]
fn exe_simple_bind(
    py: Python<'_>,
    sym: &SymHandle,
    ctx: (i32, i32),
    shapes: HashMap<String, Vec<usize>>,
    dtypes: HashMap<String, String>,
    reqs: HashMap<String, String>,
    default_req: &str,
) -> PyResult<ExeHandle> {
    let mut types = HashMap::new();
    for (k, v) in dtypes {
        types.insert(k, DType::parse(&v).map_err(to_py)?);
    }
    let mut req_map = HashMap::new();
    for (k, v) in reqs {
        req_map.insert(k, parse_req(&v)?);
    }
    let default = parse_req(default_req)?;
    let sym = sym.inner.clone();
    let exe = core(py, "executor.simple_bind", move || {
        Executor::simple_bind(
            &sym,
            Context {
                dev_type: ctx.0,
                dev_id: ctx.1,
            },
            &shapes,
            &types,
            &req_map,
            default,
        )
    })?;
    Ok(ExeHandle {
        inner: Mutex::new(exe),
    })
}

#[pymethods]
impl ExeHandle {
    fn arg_names(&self) -> Vec<String> {
        lock(self).arg_names().to_vec()
    }
    fn aux_names(&self) -> Vec<String> {
        lock(self).aux_names().to_vec()
    }
    fn grad_reqs(&self) -> Vec<&'static str> {
        lock(self)
            .grad_reqs
            .iter()
            .map(|r| match r {
                GradReq::Null => "null",
                GradReq::Write => "write",
                GradReq::Add => "add",
            })
            .collect()
    }
    fn arg_arrays(&self) -> Vec<Handle> {
        lock(self).arg_arrays.iter().cloned().map(nd).collect()
    }
    fn grad_arrays(&self) -> Vec<Option<Handle>> {
        lock(self)
            .grad_arrays
            .iter()
            .map(|g| g.clone().map(nd))
            .collect()
    }
    fn aux_arrays(&self) -> Vec<Handle> {
        lock(self).aux_arrays.iter().cloned().map(nd).collect()
    }
    /// Whether the gradients are what a backward computed since the last forward.
    fn grads_fresh(&self) -> bool {
        lock(self).grads_fresh()
    }
    fn outputs(&self) -> Vec<Handle> {
        lock(self).outputs().iter().cloned().map(nd).collect()
    }
    fn symbol(&self) -> SymHandle {
        s(lock(self).symbol().clone())
    }
    fn set_arg(&self, py: Python<'_>, name: String, value: &Handle) -> PyResult<()> {
        let v = value.inner.clone();
        core(py, "executor.set_arg", || lock(self).set_arg(&name, v))
    }
    fn set_aux(&self, py: Python<'_>, name: String, value: &Handle) -> PyResult<()> {
        let v = value.inner.clone();
        core(py, "executor.set_aux", || lock(self).set_aux(&name, v))
    }
    fn set_grad(&self, i: usize, value: Option<PyRef<'_, Handle>>) -> PyResult<()> {
        let mut e = lock(self);
        let slot = e
            .grad_arrays
            .get_mut(i)
            .ok_or_else(|| mxfn_err(format!("executor: no argument {i}")))?;
        *slot = value.map(|v| v.inner.clone());
        Ok(())
    }
    fn forward(&self, py: Python<'_>, is_train: bool) -> PyResult<()> {
        core(py, "executor.forward", || lock(self).forward(is_train))
    }
    fn backward(&self, py: Python<'_>, out_grads: Vec<PyRef<'_, Handle>>) -> PyResult<()> {
        let g: Vec<NDArray> = out_grads.iter().map(|h| h.inner.clone()).collect();
        core(py, "executor.backward", || lock(self).backward(&g))
    }
    fn reshape(&self, py: Python<'_>, shapes: HashMap<String, Vec<usize>>) -> PyResult<ExeHandle> {
        let exe = core(py, "executor.reshape", || lock(self).reshape(&shapes))?;
        Ok(ExeHandle {
            inner: Mutex::new(exe),
        })
    }
    /// Installs `f(name, NDArrayHandle)` as the monitor (None removes it); held weakly (see
    /// [`weak_monitor`]): the caller keeps `f` alive.
    fn set_monitor(&self, py: Python<'_>, f: Option<PyObject>) -> PyResult<()> {
        let cb: Option<mxfn_core::executor::Monitor> = match f {
            Some(f) => Some(weak_monitor(f.bind(py))?),
            None => None,
        };
        lock(self).set_monitor(cb);
        Ok(())
    }
}

/// A monitor callback calling `f(name, NDArrayHandle)` through a weak reference. A strong
/// reference held in Rust would be invisible to Python's garbage collector, so the cycle
/// module/executor → monitor → callback → module/executor could never be collected; the
/// Python wrapper holds `f` instead, and once it is gone the callback does nothing. A failing
/// callback must not abort the pass: it is reported as Python reports exceptions in callbacks
/// it cannot propagate.
pub(crate) fn weak_monitor(f: &Bound<'_, PyAny>) -> PyResult<mxfn_core::executor::Monitor> {
    Ok(monitor_through(Arc::new(
        PyWeakrefReference::new(f)?.unbind(),
    )))
}

/// The monitor callback of [`weak_monitor`] over an existing weak reference (one per executor
/// of a module, all sharing the reference).
pub(crate) fn monitor_through(weak: Arc<Py<PyWeakrefReference>>) -> mxfn_core::executor::Monitor {
    Box::new(move |name: &str, arr: &NDArray| {
        Python::with_gil(|py| {
            if let Some(f) = weak.bind(py).upgrade() {
                if let Err(e) = f.call1((name, nd(arr.clone()))) {
                    e.write_unraisable(py, None);
                }
            }
        })
    })
}

/// Registers the symbol, executor and operator functions.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<SymHandle>()?;
    m.add_class::<ExeHandle>()?;
    m.add_function(wrap_pyfunction!(sym_variable, m)?)?;
    m.add_function(wrap_pyfunction!(sym_create, m)?)?;
    m.add_function(wrap_pyfunction!(sym_group, m)?)?;
    m.add_function(wrap_pyfunction!(sym_load_json, m)?)?;
    m.add_function(wrap_pyfunction!(sym_save, m)?)?;
    m.add_function(wrap_pyfunction!(sym_load, m)?)?;
    m.add_function(wrap_pyfunction!(sym_reset_names, m)?)?;
    m.add_function(wrap_pyfunction!(sym_enter_name_scope, m)?)?;
    m.add_function(wrap_pyfunction!(sym_exit_name_scope, m)?)?;
    m.add_function(wrap_pyfunction!(op_list, m)?)?;
    m.add_function(wrap_pyfunction!(op_invoke, m)?)?;
    m.add_function(wrap_pyfunction!(exe_bind, m)?)?;
    m.add_function(wrap_pyfunction!(exe_simple_bind, m)?)?;
    Ok(())
}
