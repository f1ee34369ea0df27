//! Parameter sharing between the modules of a BucketingModule (MXNet's `shared_module`).
//!
//! Every parameter name has one array (per device) across all buckets: the bucket that is
//! current holds it, and the bucket switched to adopts it (a reference-counted handle, no data
//! copy). The bucket it came from keeps an empty array in the vacated slot instead: arrays have value
//! semantics (an update of a shared buffer copies it first), so a stale reference left in a
//! bucket that is not current would cost a copy of the parameters per bucket and a copy per
//! update. Buckets may differ in their parameter sets; the bucketing layer (mxfn.module) knows
//! which bucket holds each name and which names are new.

use super::Module;
use crate::error::{Error, Result};
use crate::executor::Executor;
use crate::NDArray;
use std::collections::BTreeMap;

/// Where a bucket's parameters come from: the names `module` holds now.
pub type Adopt<'a> = (&'a mut Module, Vec<String>);

/// The empty array a vacated slot holds: its parameter now lives in another bucket.
fn vacated(like: &NDArray) -> NDArray {
    NDArray::zeros(&[0], like.dtype())
}

impl Module {
    /// Points this module's parameters and auxiliary states at `src`'s (same names, same
    /// shapes, device by device; no data is copied) and marks the parameters initialised.
    /// Both modules must be bound on the same number of contexts, and every parameter and
    /// auxiliary state of this module must exist in `src`.
    pub fn share_params_from(&mut self, src: &Module) -> Result<()> {
        self.need_bound("share_params_from")?;
        src.need_params("share_params_from")?;
        if self.execs.len() != src.execs.len() {
            return Err(Error::invalid(
                "module.share_params_from: contexts",
                format!("{} contexts (the shared module's)", src.execs.len()),
                format!("{}", self.execs.len()),
            ));
        }
        let missing = self
            .param_names
            .iter()
            .find(|n| !src.param_names.contains(n))
            .or_else(|| self.aux_names.iter().find(|n| !src.aux_names.contains(n)));
        if let Some(name) = missing {
            return Err(Error::NotFound {
                kind: "module.share_params_from: parameter of this bucket missing from the \
                       shared module (name it the same in every bucket)"
                    .to_string(),
                name: name.clone(),
            });
        }
        for (dst, s) in self.execs.iter_mut().zip(&src.execs) {
            for name in &self.param_names {
                dst.set_arg(name, s.arg(name)?.clone())?;
                // Buckets share gradients too (SPEC §8): with grad_req "add" they accumulate
                // across buckets until the next update, as MXNet's shared arrays do.
                let i = dst.arg_names().iter().position(|n| n == name);
                if let (Some(i), Some(g)) = (i, s.grad(name)?) {
                    if let Some(slot @ Some(_)) = dst.grad_arrays.get_mut(i) {
                        if slot.as_ref().is_some_and(|d| d.shape() == g.shape()) {
                            *slot = Some(g.clone());
                        }
                    }
                }
            }
            for name in &self.aux_names {
                let i = s.aux_names().iter().position(|n| n == name);
                if let Some(v) = i.and_then(|i| s.aux_arrays.get(i)) {
                    dst.set_aux(name, v.clone())?;
                }
            }
        }
        self.held_args = None;
        self.held_aux = None;
        self.params_initialized = true;
        Ok(())
    }

    /// The optimizer index of the parameter at position `i` of `param_names`.
    pub(super) fn opt_idx(&self, i: usize) -> usize {
        self.opt_index.get(i).copied().unwrap_or(i)
    }

    /// Whether `v` has the shape parameter `n` is bound with (an error naming both if not).
    fn check_bound_shape(&self, call: &str, n: &str, v: &NDArray) -> Result<()> {
        let want = self.bound_shape(n).unwrap_or_default();
        if want == v.shape() {
            Ok(())
        } else {
            Err(Error::shape(
                call,
                format!("parameter \"{n}\""),
                &want,
                v.shape(),
            ))
        }
    }

    /// Releases every executor's last pass ([`Executor::release_pass`]): the working memory
    /// of a bucket switched away from goes back for the next bucket to use. Its outputs and
    /// backward need a forward again.
    pub fn release_pass(&mut self) {
        self.execs.iter_mut().for_each(Executor::release_pass);
        self.forwarded = false;
    }

    /// The bound shapes of the parameters and auxiliary states, in `param_names` /
    /// `aux_names` order (those another bucket holds included).
    #[allow(clippy::type_complexity)]
    pub fn param_shapes(&self) -> Result<(Vec<(String, Vec<usize>)>, Vec<(String, Vec<usize>)>)> {
        self.need_bound("param_shapes")?;
        let exe = self
            .execs
            .first()
            .ok_or_else(|| super::lifecycle("param_shapes", "bind"))?;
        let shape = |name: &String, a: &NDArray| {
            let s = self.vacant.get(name).cloned();
            (name.clone(), s.unwrap_or_else(|| a.shape().to_vec()))
        };
        let args = self
            .param_names
            .iter()
            .map(|n| Ok(shape(n, exe.arg(n)?)))
            .collect::<Result<Vec<_>>>()?;
        let aux = self
            .aux_names
            .iter()
            .zip(&exe.aux_arrays)
            .map(|(n, a)| shape(n, a))
            .collect();
        Ok((args, aux))
    }

    fn bound_shape(&self, name: &str) -> Option<Vec<usize>> {
        if let Some(s) = self.vacant.get(name) {
            return Some(s.clone());
        }
        let exe = self.execs.first()?;
        if let Ok(a) = exe.arg(name) {
            return Some(a.shape().to_vec());
        }
        let i = exe.aux_names().iter().position(|n| n == name)?;
        exe.aux_arrays.get(i).map(|a| a.shape().to_vec())
    }

    /// Makes this bucket's parameters whole: the names listed for each other bucket's module
    /// are taken from it (their arrays and gradients move here, no data copy; that module
    /// keeps vacated slots for them), `given` values (params and auxiliary states by name) are
    /// set, and every other name must already hold a value here. Everything is checked first
    /// (names, shapes, contexts); on success the parameters count as initialised.
    pub fn assemble_params(
        &mut self,
        adopt: &mut [Adopt<'_>],
        given: BTreeMap<String, NDArray>,
    ) -> Result<()> {
        const CALL: &str = "module.switch_bucket";
        self.need_bound("switch_bucket")?;
        let is_param = |m: &Module, n: &str| m.param_names.iter().any(|p| p == n);
        let is_aux = |m: &Module, n: &str| m.aux_names.iter().any(|p| p == n);
        let had_values = self.params_initialized || !self.vacant.is_empty();
        let mut covered: Vec<&str> = given.keys().map(String::as_str).collect();
        for (src, names) in adopt.iter() {
            src.need_bound("switch_bucket")?;
            if src.execs.len() != self.execs.len() {
                return Err(Error::invalid(
                    format!("{CALL}: contexts"),
                    format!("{} contexts (the shared module's)", src.execs.len()),
                    format!("{}", self.execs.len()),
                ));
            }
            for n in names {
                let kind_ok =
                    (is_param(self, n) && is_param(src, n)) || (is_aux(self, n) && is_aux(src, n));
                if !kind_ok || src.vacant.contains_key(n) || !src.had_values() {
                    return Err(Error::NotFound {
                        kind: format!("{CALL}: parameter held by the shared module"),
                        name: n.clone(),
                    });
                }
                let (want, got) = (self.bound_shape(n), src.bound_shape(n));
                if want != got {
                    return Err(Error::shape(
                        CALL,
                        format!("parameter \"{n}\""),
                        want.unwrap_or_default(),
                        got.unwrap_or_default(),
                    ));
                }
                covered.push(n);
            }
        }
        for (n, v) in &given {
            if !is_param(self, n) && !is_aux(self, n) {
                return Err(Error::NotFound {
                    kind: format!("{CALL}: parameter of this bucket"),
                    name: n.clone(),
                });
            }
            self.check_bound_shape(CALL, n, v)?;
        }
        let missing = self.param_names.iter().chain(&self.aux_names).find(|n| {
            !covered.contains(&n.as_str()) && (!had_values || self.vacant.contains_key(*n))
        });
        if let Some(n) = missing {
            return Err(Error::NotFound {
                kind: format!("{CALL}: a value (held by no bucket, not given) for parameter"),
                name: n.clone(),
            });
        }
        for (src, names) in adopt.iter_mut() {
            for n in names.iter() {
                let shape = src.bound_shape(n).unwrap_or_default();
                for (dst, s) in self.execs.iter_mut().zip(src.execs.iter_mut()) {
                    if let Some(i) = s.arg_names().iter().position(|x| x == n) {
                        let j = dst.arg_names().iter().position(|x| x == n);
                        let Some(j) = j else { continue };
                        let p = vacated(&s.arg_arrays[i]);
                        let v = std::mem::replace(&mut s.arg_arrays[i], p);
                        dst.arg_arrays[j] = v.astype(dst.arg_arrays[j].dtype());
                        // Buckets share gradients too (SPEC §8): with grad_req "add" they
                        // accumulate across buckets until the next update, as MXNet's shared
                        // arrays do. A bucket bound without gradients passes none on.
                        let g = s.grad_arrays[i].as_mut().map(|g| {
                            let p = vacated(g);
                            std::mem::replace(g, p)
                        });
                        if let Some(slot) = dst.grad_arrays[j].as_mut() {
                            *slot = match g {
                                Some(g) if g.shape() == shape.as_slice() => g,
                                _ => NDArray::zeros(&shape, slot.dtype()),
                            };
                        }
                    } else if let Some(i) = s.aux_names().iter().position(|x| x == n) {
                        let j = dst.aux_names().iter().position(|x| x == n);
                        let Some(j) = j else { continue };
                        let p = vacated(&s.aux_arrays[i]);
                        let v = std::mem::replace(&mut s.aux_arrays[i], p);
                        dst.aux_arrays[j] = v.astype(dst.aux_arrays[j].dtype());
                    }
                }
                src.vacant.insert(n.clone(), shape);
                self.vacant.remove(n);
            }
            // A module missing some of its arrays can run nothing until it adopts them back.
            src.params_initialized = false;
            src.held_args = None;
            src.held_aux = None;
        }
        for (n, v) in &given {
            self.put_value(n, v);
            self.vacant.remove(n);
        }
        self.held_args = None;
        self.held_aux = None;
        self.params_initialized = true;
        Ok(())
    }

    /// Replaces the values of parameters and auxiliary states this module holds (not taken by
    /// another bucket): `set_params` reaching a bucket that is not current. Every name must be
    /// held here with the given shape; all are checked before any is set.
    pub fn set_held_params(&mut self, given: BTreeMap<String, NDArray>) -> Result<()> {
        const CALL: &str = "module.set_params";
        self.need_bound("set_params")?;
        for (n, v) in &given {
            let known = self.param_names.contains(n) || self.aux_names.contains(n);
            if !known || !self.had_values() || self.vacant.contains_key(n) {
                return Err(Error::NotFound {
                    kind: format!("{CALL}: parameter held by this bucket"),
                    name: n.clone(),
                });
            }
            self.check_bound_shape(CALL, n, v)?;
        }
        for (n, v) in &given {
            self.put_value(n, v);
        }
        self.held_args = None;
        self.held_aux = None;
        Ok(())
    }

    /// Sets `n` on every device, by position: the slot may be vacated (an empty array), which `Executor::set_arg` would reject for its shape.
    fn put_value(&mut self, n: &str, v: &NDArray) {
        for exe in &mut self.execs {
            let ctx = exe.context();
            if let Some(i) = exe.arg_names().iter().position(|x| x == n) {
                let dtype = exe.arg_arrays[i].dtype();
                exe.arg_arrays[i] = v.astype(dtype).as_in_context(ctx);
            } else if let Some(i) = exe.aux_names().iter().position(|x| x == n) {
                let dtype = exe.aux_arrays[i].dtype();
                exe.aux_arrays[i] = v.astype(dtype).as_in_context(ctx);
            }
        }
    }

    fn had_values(&self) -> bool {
        self.params_initialized || !self.vacant.is_empty()
    }

    /// Copies (averaged over the devices) of the named parameters and auxiliary states this
    /// module holds; names it does not hold are left out. Works on a module other buckets
    /// took some arrays from.
    #[allow(clippy::type_complexity)]
    pub fn held_params(
        &self,
        names: &[String],
    ) -> Result<(BTreeMap<String, NDArray>, BTreeMap<String, NDArray>)> {
        self.need_bound("get_params")?;
        if !self.had_values() {
            return Ok((BTreeMap::new(), BTreeMap::new()));
        }
        let (mut args, mut aux) = self.synced_params();
        let keep = |k: &String| names.contains(k) && !self.vacant.contains_key(k);
        args.retain(|k, _| keep(k));
        aux.retain(|k, _| keep(k));
        Ok((args, aux))
    }

    /// Gives the parameters their optimizer indices (by name; every parameter needs one) and
    /// registers the names with the installed optimizer, so buckets whose parameter sets
    /// differ share one optimizer state per name.
    pub fn set_param_indices(&mut self, index: &BTreeMap<String, usize>) -> Result<()> {
        let idx = self
            .param_names
            .iter()
            .map(|n| {
                index.get(n).copied().ok_or_else(|| Error::NotFound {
                    kind: "module.set_param_indices: optimizer index for parameter".into(),
                    name: n.clone(),
                })
            })
            .collect::<Result<Vec<usize>>>()?;
        self.opt_index = idx;
        self.register_with_optimizer()
    }

    /// Adds this module's parameters (index → name) and its symbol's `__lr_mult__` /
    /// `__wd_mult__` attributes to the installed optimizer when it lacks them (a bucket with
    /// parameters the module that installed the optimizer does not have).
    pub(super) fn register_with_optimizer(&mut self) -> Result<()> {
        if self.opt_index.is_empty() {
            return Ok(());
        }
        let Some(opt) = self.optimizer.clone() else {
            return Ok(());
        };
        let mut o = super::lock_opt(&opt);
        let mut map = o.idx2name().clone();
        let before = map.len();
        for (i, n) in self.param_names.iter().enumerate() {
            map.entry(self.opt_idx(i)).or_insert_with(|| n.clone());
        }
        if map.len() != before {
            o.set_idx2name(map);
            let (lr, wd) = self.symbol_mults()?;
            o.merge_symbol_mults(lr, wd)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::io::DataDesc;
    use crate::module::{BindOptions, InitOptions, Module, ModuleOptions};
    use crate::symbol::Symbol;
    use crate::{DType, NDArray};
    use std::collections::BTreeMap;

    fn fc(name: &str, width: usize) -> Module {
        let x = Symbol::variable("data");
        let y = Symbol::create(
            "FullyConnected",
            Some(name),
            &[("num_hidden", "2")],
            vec![(None, x)],
        )
        .unwrap();
        let opts = ModuleOptions {
            label_names: vec![],
            ..Default::default()
        };
        let mut m = Module::new(y, opts).unwrap();
        m.bind(BindOptions {
            data_shapes: vec![DataDesc::new("data", &[4, width])],
            ..Default::default()
        })
        .unwrap();
        m
    }

    fn names(m: &Module) -> Vec<String> {
        m.param_names().to_vec()
    }

    #[test]
    fn moves_params_without_copying() {
        let mut a = fc("fc", 3);
        a.init_params(InitOptions::default()).unwrap();
        let want = a.get_params().unwrap().0;
        let ptr = a.execs[0]
            .arg("fc_weight")
            .unwrap()
            .f32s("a")
            .unwrap()
            .as_ptr();
        let mut b = fc("fc", 3);
        assert!(!b.params_initialized());
        let n = names(&b);
        b.assemble_params(&mut [(&mut a, n)], BTreeMap::new())
            .unwrap();
        assert!(b.params_initialized() && !a.params_initialized());
        let (pb, _) = b.get_params().unwrap();
        for (k, v) in &want {
            assert_eq!(v.to_f64_vec(), pb[k].to_f64_vec());
        }
        let wb = b.execs[0].arg("fc_weight").unwrap();
        assert_eq!(wb.f32s("b").unwrap().as_ptr(), ptr);
        // a keeps vacated slots only, and reports its bound shapes still
        assert_eq!(a.execs[0].arg("fc_weight").unwrap().shape(), &[0]);
        assert_eq!(a.param_shapes().unwrap().0[0].1, vec![2, 3]);
        assert!(a.held_params(&names(&a)).unwrap().0.is_empty());
        // and adopts them back
        let n = names(&a);
        a.assemble_params(&mut [(&mut b, n)], BTreeMap::new())
            .unwrap();
        assert_eq!(
            a.execs[0]
                .arg("fc_weight")
                .unwrap()
                .f32s("a")
                .unwrap()
                .as_ptr(),
            ptr
        );
    }

    #[test]
    fn takes_new_names_from_given_values() {
        let mut a = fc("fc", 3);
        a.init_params(InitOptions::default()).unwrap();
        let mut b = fc("fc", 3);
        let bias = NDArray::ones(&[2], DType::Float32);
        let given = BTreeMap::from([("fc_bias".to_string(), bias)]);
        b.assemble_params(&mut [(&mut a, vec!["fc_weight".into()])], given)
            .unwrap();
        assert_eq!(
            b.get_params().unwrap().0["fc_bias"].to_f64_vec(),
            vec![1.0; 2]
        );
        // a still holds its bias
        assert_eq!(a.held_params(&names(&a)).unwrap().0.len(), 1);
    }

    #[test]
    fn rejects_unknown_params_shapes_and_gaps() {
        let mut a = fc("fc", 3);
        a.init_params(InitOptions::default()).unwrap();
        let mut other = fc("other", 3);
        let n = names(&other);
        assert!(other
            .assemble_params(&mut [(&mut a, n)], BTreeMap::new())
            .is_err());
        let mut wide = fc("fc", 5);
        let n = names(&wide);
        let e = wide
            .assemble_params(&mut [(&mut a, n)], BTreeMap::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("fc_weight"), "{e}");
        // a was not changed by the failed calls
        assert!(a.params_initialized());
        let mut c = fc("fc", 3);
        let e = c
            .assemble_params(&mut [(&mut a, vec!["fc_weight".into()])], BTreeMap::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("fc_bias"), "{e}");
        let mut unbound_src = fc("fc", 3);
        let n = names(&c);
        assert!(c
            .assemble_params(&mut [(&mut unbound_src, n)], BTreeMap::new())
            .is_err());
    }

    #[test]
    fn sets_held_params_only() {
        let mut a = fc("fc", 3);
        a.init_params(InitOptions::default()).unwrap();
        let mut b = fc("fc", 3);
        b.assemble_params(
            &mut [(&mut a, vec!["fc_weight".into()])],
            BTreeMap::from([("fc_bias".to_string(), NDArray::zeros(&[2], DType::Float32))]),
        )
        .unwrap();
        // a holds its bias only: the weight went to b
        let w = NDArray::ones(&[2, 3], DType::Float32);
        let e = a
            .set_held_params(BTreeMap::from([("fc_weight".to_string(), w)]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("fc_weight"), "{e}");
        let e = a
            .set_held_params(BTreeMap::from([(
                "fc_bias".to_string(),
                NDArray::ones(&[3], DType::Float32),
            )]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("fc_bias") && e.contains('3'), "{e}");
        let bias = NDArray::full(&[2], 7.0, DType::Float32);
        a.set_held_params(BTreeMap::from([("fc_bias".to_string(), bias)]))
            .unwrap();
        let names = vec!["fc_weight".to_string(), "fc_bias".to_string()];
        let (held, _) = a.held_params(&names).unwrap();
        assert_eq!(held.keys().collect::<Vec<_>>(), vec!["fc_bias"]);
        assert_eq!(held["fc_bias"].to_f64_vec(), vec![7.0; 2]);
    }
}
