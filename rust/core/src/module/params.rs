//! Parameters: initialising, setting and reading them, keeping the held copy in sync with the
//! per-device executors, and reading a checkpoint's `.params` file into arg / aux maps.

use super::*;

/// Reads a checkpoint `.params` file and splits it into `arg:` and `aux:` params.
#[allow(clippy::type_complexity)]
pub fn load_params_file(
    path: &std::path::Path,
) -> Result<(BTreeMap<String, NDArray>, BTreeMap<String, NDArray>)> {
    let list = params_file::load(path)?;
    let d = match list {
        NdList::Dict(d) => d,
        NdList::List(l) if l.is_empty() => vec![],
        NdList::List(_) => {
            return Err(Error::format(
                path.display().to_string(),
                "a checkpoint holds a dict of arg:/aux: arrays, this file an unnamed list",
            ))
        }
    };
    let (mut args, mut aux) = (BTreeMap::new(), BTreeMap::new());
    for (k, v) in d {
        if let Some(n) = k.strip_prefix("arg:") {
            args.insert(n.to_string(), v);
        } else if let Some(n) = k.strip_prefix("aux:") {
            aux.insert(n.to_string(), v);
        } else {
            return Err(Error::format(
                path.display().to_string(),
                format!("key \"{k}\" has neither the arg: nor the aux: prefix"),
            ));
        }
    }
    Ok((args, aux))
}

impl Module {
    pub(super) fn sync_to_held(&mut self) {
        let (a, x) = self.synced_params();
        self.held_args = Some(a);
        self.held_aux = Some(x);
    }

    /// Writes the given params into every executor; missing names are errors unless
    /// `allow_missing` (then they keep their value), extra names unless `allow_extra`.
    pub(super) fn write_params(
        &mut self,
        args: Option<&BTreeMap<String, NDArray>>,
        aux: Option<&BTreeMap<String, NDArray>>,
        allow_missing: bool,
        allow_extra: bool,
    ) -> Result<()> {
        if let Some(a) = args {
            self.check_params("arg", a, &self.param_names, allow_missing, allow_extra)?;
        }
        if let Some(a) = aux {
            self.check_params("aux", a, &self.aux_names, allow_missing, allow_extra)?;
        }
        for exe in &mut self.execs {
            if let Some(a) = args {
                for n in &self.param_names {
                    if let Some(v) = a.get(n) {
                        exe.set_arg(n, v.deep_copy())?;
                    }
                }
            }
            if let Some(a) = aux {
                for n in &self.aux_names {
                    if let Some(v) = a.get(n) {
                        exe.set_aux(n, v.deep_copy())?;
                    }
                }
            }
        }
        Ok(())
    }

    pub(super) fn check_params(
        &self,
        kind: &str,
        given: &BTreeMap<String, NDArray>,
        names: &[String],
        allow_missing: bool,
        allow_extra: bool,
    ) -> Result<()> {
        if !allow_missing {
            if let Some(n) = names.iter().find(|n| !given.contains_key(*n)) {
                return Err(Error::NotFound {
                    kind: format!(
                        "module.init_params: {kind} parameter missing from the given params (pass allow_missing to initialise it)"
                    ),
                    name: n.clone(),
                });
            }
        }
        if !allow_extra {
            if let Some(n) = given.keys().find(|k| !names.contains(k)) {
                return Err(Error::invalid(
                    format!("module.init_params: {kind}_params \"{n}\""),
                    format!(
                        "a {kind} parameter of the module ({}), or allow_extra",
                        names.join(", ")
                    ),
                    format!("the extra name \"{n}\""),
                ));
            }
        }
        let exe = match self.execs.first() {
            Some(e) => e,
            None => return Ok(()),
        };
        for (n, v) in given {
            let cur = if kind == "arg" {
                match exe.arg_names().iter().position(|x| x == n) {
                    Some(i) if names.contains(n) => &exe.arg_arrays[i],
                    _ => continue,
                }
            } else {
                match exe.aux_names().iter().position(|x| x == n) {
                    Some(i) => &exe.aux_arrays[i],
                    None => continue,
                }
            };
            if cur.shape() != v.shape() {
                return Err(Error::shape(
                    "module.init_params",
                    format!("parameter \"{n}\""),
                    cur.shape(),
                    v.shape(),
                ));
            }
        }
        Ok(())
    }

    /// Initialises the parameters: given values are copied, the rest (with `allow_missing`, or
    /// all when none are given) go through the initializer by MXNet's name rules, in sorted
    /// name order. Does nothing on an initialised module unless `force_init`.
    pub fn init_params(&mut self, opts: InitOptions) -> Result<()> {
        if self.params_initialized && !opts.force_init {
            self.warnings.push(
                "module.init_params: parameters already initialised; ignoring (pass force_init)"
                    .to_string(),
            );
            return Ok(());
        }
        self.need_bound("init_params")?;
        let init = match opts.initializer {
            Some(i) => i,
            None => Initializer::uniform(0.01)?,
        };
        self.init_impl(
            &init,
            opts.arg_params.as_ref(),
            opts.aux_params.as_ref(),
            opts.allow_missing,
            opts.allow_extra,
            false,
        )
    }

    pub(super) fn init_impl(
        &mut self,
        init: &Initializer,
        args: Option<&BTreeMap<String, NDArray>>,
        aux: Option<&BTreeMap<String, NDArray>>,
        allow_missing: bool,
        allow_extra: bool,
        keep_missing: bool,
    ) -> Result<()> {
        // Validate everything before changing anything.
        if let Some(a) = args {
            self.check_params("arg", a, &self.param_names, allow_missing, allow_extra)?;
        }
        if let Some(a) = aux {
            self.check_params("aux", a, &self.aux_names, allow_missing, allow_extra)?;
        }
        let exe = self
            .execs
            .first()
            .ok_or_else(|| lifecycle("init_params", "bind"))?;
        let attrs = self.symbol.attr_dict();
        let mut new_args: BTreeMap<String, NDArray> = BTreeMap::new();
        let mut sorted: Vec<&String> = self.param_names.iter().collect();
        sorted.sort();
        for n in sorted {
            let cur = exe.arg(n)?;
            let v = match args.and_then(|a| a.get(n)) {
                Some(v) => v.astype(cur.dtype()).deep_copy(),
                None if keep_missing => continue,
                None => init.apply(n, attrs.get(n), cur)?,
            };
            new_args.insert(n.clone(), v);
        }
        let mut new_aux: BTreeMap<String, NDArray> = BTreeMap::new();
        let mut sorted: Vec<&String> = self.aux_names.iter().collect();
        sorted.sort();
        for n in sorted {
            let i = exe
                .aux_names()
                .iter()
                .position(|x| x == n)
                .ok_or_else(|| Error::NotFound {
                    kind: "auxiliary state".into(),
                    name: n.clone(),
                })?;
            let cur = &exe.aux_arrays[i];
            let v = match aux.and_then(|a| a.get(n)) {
                Some(v) => v.astype(cur.dtype()).deep_copy(),
                None if keep_missing => continue,
                None => init.apply(n, attrs.get(n), cur)?,
            };
            new_aux.insert(n.clone(), v);
        }
        self.write_params(Some(&new_args), Some(&new_aux), true, true)?;
        self.params_initialized = true;
        self.held_args = None;
        self.held_aux = None;
        // With several workers, every one continues from rank 0's values.
        self.broadcast_params("module.init_params")
    }

    /// Sets parameters (SPEC §8): with `allow_missing`, a missing parameter keeps its value on an
    /// initialised module and is initialised with the default initializer otherwise;
    /// `aux_params = None` leaves the auxiliary states as they are.
    pub fn set_params(&mut self, opts: InitOptions) -> Result<()> {
        if self.params_initialized && !opts.force_init {
            self.warnings.push(
                "module.set_params: parameters already initialised; ignoring (force_init is false)"
                    .to_string(),
            );
            return Ok(());
        }
        self.need_bound("set_params")?;
        let init = match opts.initializer {
            Some(i) => i,
            None => Initializer::uniform(0.01)?,
        };
        let keep = self.params_initialized;
        self.init_impl(
            &init,
            opts.arg_params.as_ref(),
            opts.aux_params.as_ref(),
            opts.allow_missing,
            opts.allow_extra,
            keep,
        )
    }

    /// Parameter values averaged over the devices (copies).
    pub(super) fn synced_params(&self) -> (BTreeMap<String, NDArray>, BTreeMap<String, NDArray>) {
        let n = self.execs.len().max(1) as f64;
        let avg = |xs: Vec<&NDArray>| -> NDArray {
            let mut it = xs.into_iter();
            let first = match it.next() {
                Some(f) => f.deep_copy(),
                None => return NDArray::zeros(&[0], crate::DType::Float32),
            };
            if n <= 1.0 {
                return first;
            }
            let mut acc = first;
            for x in it {
                acc = acc.add(x).unwrap_or(acc);
            }
            acc.mul_scalar(1.0 / n)
                .unwrap_or_else(|_| NDArray::zeros(&[0], crate::DType::Float32))
        };
        let mut args = BTreeMap::new();
        for name in &self.param_names {
            let xs: Vec<&NDArray> = self.execs.iter().filter_map(|e| e.arg(name).ok()).collect();
            if self.fixed.contains(name) || self.execs.len() == 1 {
                if let Some(x) = xs.first() {
                    args.insert(name.clone(), x.deep_copy());
                }
            } else {
                args.insert(name.clone(), avg(xs));
            }
        }
        let mut aux = BTreeMap::new();
        for (i, name) in self.aux_names.iter().enumerate() {
            let xs: Vec<&NDArray> = self
                .execs
                .iter()
                .filter_map(|e| e.aux_arrays.get(i))
                .collect();
            aux.insert(name.clone(), avg(xs));
        }
        (args, aux)
    }

    /// `(arg_params, aux_params)`: copies, averaged over the devices.
    pub fn get_params(&self) -> Result<(BTreeMap<String, NDArray>, BTreeMap<String, NDArray>)> {
        if !self.binded {
            if let (Some(a), Some(x)) = (&self.held_args, &self.held_aux) {
                return Ok((a.clone(), x.clone()));
            }
        }
        self.need_params("get_params")?;
        Ok(self.synced_params())
    }
}
