//! BucketingModule bindings. `mod_share_params` points one module at another's parameter
//! arrays (no data copy; `shared_module`); the BucketingModule moves arrays between its
//! buckets' modules instead (`mod_assemble_params`, `mod_set_held_params`, `mod_held_params`,
//! `mod_param_shapes`, `mod_set_param_indices`) and releases the working memory of the bucket
//! it leaves (`mod_release_pass`). Which bucket holds which name is kept by
//! `mxfn.module`.

use crate::error::{core, mxfn_err};
use crate::module::ModuleHandle;
use crate::nd::Handle;
use mxfn_core::module::Module;
use mxfn_core::NDArray;
use pyo3::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::sync::MutexGuard;

type Shapes = Vec<(String, Vec<usize>)>;
type Named = Vec<(String, Handle)>;

#[pyfunction]
fn mod_share_params(py: Python<'_>, h: &ModuleHandle, src: &ModuleHandle) -> PyResult<()> {
    if std::ptr::eq(h, src) {
        return Ok(());
    }
    core(py, "module.bucketing_module", || {
        let s = src.lock();
        h.lock().share_params_from(&s)
    })
}

fn values(given: HashMap<String, PyRef<'_, Handle>>) -> BTreeMap<String, NDArray> {
    given
        .into_iter()
        .map(|(k, v)| (k, v.inner.clone()))
        .collect()
}

/// Makes `h`'s module whole: for each `(holder, names)` of `adopt` the names' arrays move
/// from the holder's module to `h`'s (the holder's slots are left empty); `given` values are set.
#[pyfunction]
fn mod_assemble_params(
    py: Python<'_>,
    h: &ModuleHandle,
    adopt: Vec<(PyRef<'_, ModuleHandle>, Vec<String>)>,
    given: HashMap<String, PyRef<'_, Handle>>,
) -> PyResult<()> {
    let given = values(given);
    // Locking one module twice would deadlock: every holder must be another, distinct module.
    let mut seen: Vec<*const ModuleHandle> = vec![h as *const ModuleHandle];
    for (src, _) in &adopt {
        let p: *const ModuleHandle = &**src;
        if seen.contains(&p) {
            return Err(mxfn_err(
                "module.switch_bucket: adopt: expected each holder once and never the bucket \
                 itself, got a module twice"
                    .to_string(),
            ));
        }
        seen.push(p);
    }
    let srcs: Vec<(&ModuleHandle, Vec<String>)> =
        adopt.iter().map(|(m, n)| (&**m, n.clone())).collect();
    core(py, "module.switch_bucket", move || {
        // Locked in address order, so two calls over the same modules cannot deadlock.
        let mut order: Vec<usize> = (0..srcs.len()).collect();
        order.sort_by_key(|&i| srcs[i].0 as *const ModuleHandle as usize);
        let me = h as *const ModuleHandle as usize;
        let mut target: Option<MutexGuard<'_, Module>> = None;
        let mut guards: Vec<Option<MutexGuard<'_, Module>>> = srcs.iter().map(|_| None).collect();
        for &i in &order {
            if target.is_none() && me < srcs[i].0 as *const ModuleHandle as usize {
                target = Some(h.lock());
            }
            guards[i] = Some(srcs[i].0.lock());
        }
        let mut target = target.unwrap_or_else(|| h.lock());
        let mut pairs: Vec<(&mut Module, Vec<String>)> = guards
            .iter_mut()
            .zip(&srcs)
            .filter_map(|(g, (_, n))| g.as_deref_mut().map(|m| (m, n.clone())))
            .collect();
        target.assemble_params(&mut pairs, given)
    })
}

/// Replaces values of names `h`'s module holds (a bucket that is not current).
#[pyfunction]
fn mod_set_held_params(
    py: Python<'_>,
    h: &ModuleHandle,
    given: HashMap<String, PyRef<'_, Handle>>,
) -> PyResult<()> {
    let given = values(given);
    core(py, "module.set_params", || h.lock().set_held_params(given))
}

/// Releases the working memory of `h`'s last pass (the bucket switched away from).
#[pyfunction]
fn mod_release_pass(py: Python<'_>, h: &ModuleHandle) -> PyResult<()> {
    core(py, "module.switch_bucket", || {
        h.lock().release_pass();
        Ok(())
    })
}

/// (params, aux states) as (name, bound shape) lists in the module's order, the names other
/// buckets took included.
#[pyfunction]
fn mod_param_shapes(py: Python<'_>, h: &ModuleHandle) -> PyResult<(Shapes, Shapes)> {
    core(py, "module.switch_bucket", || h.lock().param_shapes())
}

/// Copies of the named params and aux states `h`'s module holds, in its order.
#[pyfunction]
fn mod_held_params(
    py: Python<'_>,
    h: &ModuleHandle,
    names: Vec<String>,
) -> PyResult<(Named, Named)> {
    core(py, "module.get_params", || {
        let m = h.lock();
        let (mut a, mut x) = m.held_params(&names)?;
        let pick = |order: &[String], got: &mut BTreeMap<String, NDArray>| -> Named {
            order
                .iter()
                .filter_map(|n| got.remove(n).map(|v| (n.clone(), Handle { inner: v })))
                .collect()
        };
        Ok((pick(m.param_names(), &mut a), pick(m.aux_names(), &mut x)))
    })
}

/// Gives `h`'s parameters their optimizer indices by name (shared by every bucket).
#[pyfunction]
fn mod_set_param_indices(
    py: Python<'_>,
    h: &ModuleHandle,
    index: HashMap<String, usize>,
) -> PyResult<()> {
    let index: BTreeMap<String, usize> = index.into_iter().collect();
    core(py, "module.switch_bucket", || {
        h.lock().set_param_indices(&index)
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(mod_share_params, m)?)?;
    m.add_function(wrap_pyfunction!(mod_assemble_params, m)?)?;
    m.add_function(wrap_pyfunction!(mod_set_held_params, m)?)?;
    m.add_function(wrap_pyfunction!(mod_param_shapes, m)?)?;
    m.add_function(wrap_pyfunction!(mod_release_pass, m)?)?;
    m.add_function(wrap_pyfunction!(mod_held_params, m)?)?;
    m.add_function(wrap_pyfunction!(mod_set_param_indices, m)?)?;
    Ok(())
}
