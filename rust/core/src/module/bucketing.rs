//! Parameter sharing between the modules of a BucketingModule (MXNet's `shared_module`).
//!
//! A bucket's module adopts the parameter arrays of the bucket that was current before it:
//! each executor argument / auxiliary state is pointed at the other module's array (a
//! reference-counted handle, no data copy). Arrays have value semantics, so the modules
//! diverge again once one of them updates; the bucketing layer re-adopts on every switch.

use super::Module;
use crate::error::{Error, Result};

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
}

#[cfg(test)]
mod tests {
    use crate::io::DataDesc;
    use crate::module::{BindOptions, InitOptions, Module, ModuleOptions};
    use crate::symbol::Symbol;

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

    #[test]
    fn shares_params_without_copying() {
        let mut a = fc("fc", 3);
        a.init_params(InitOptions::default()).unwrap();
        let mut b = fc("fc", 3);
        assert!(!b.params_initialized());
        b.share_params_from(&a).unwrap();
        assert!(b.params_initialized());
        let (pa, _) = a.get_params().unwrap();
        let (pb, _) = b.get_params().unwrap();
        for (k, v) in &pa {
            assert_eq!(v.to_f64_vec(), pb[k].to_f64_vec());
        }
        let wa = a.execs[0].arg("fc_weight").unwrap();
        let wb = b.execs[0].arg("fc_weight").unwrap();
        assert_eq!(
            wa.f32s("a").unwrap().as_ptr(),
            wb.f32s("b").unwrap().as_ptr()
        );
    }

    #[test]
    fn rejects_unknown_params_and_shapes() {
        let mut a = fc("fc", 3);
        a.init_params(InitOptions::default()).unwrap();
        let mut other = fc("other", 3);
        assert!(other.share_params_from(&a).is_err());
        let mut wide = fc("fc", 5);
        assert!(wide.share_params_from(&a).is_err());
        let unbound = fc("fc", 3);
        let mut c = fc("fc", 3);
        assert!(c.share_params_from(&unbound).is_err());
    }
}
