//! Checkpoints in MXNet's files: `prefix-symbol.json`, `prefix-%04d.params` and
//! `prefix-%04d.states` (the optimizer states, `tensor::states_file`).

use super::*;
use crate::tensor::states_file;

/// `prefix-%04d.params`.
pub fn params_path(prefix: &str, epoch: usize) -> PathBuf {
    PathBuf::from(format!("{prefix}-{epoch:04}.params"))
}

/// `prefix-%04d.states`.
pub fn states_path(prefix: &str, epoch: usize) -> PathBuf {
    PathBuf::from(format!("{prefix}-{epoch:04}.states"))
}

impl Module {
    /// Loads `prefix-symbol.json` and `prefix-%04d.params` into a new module; the params are
    /// applied at `bind` (the module counts as initialised).
    pub fn load(prefix: &str, epoch: usize, opts: ModuleOptions) -> Result<Module> {
        let symbol = json::load(format!("{prefix}-symbol.json"))?;
        let (args, aux) = load_params_file(&params_path(prefix, epoch))?;
        let mut m = Module::new(symbol, opts)?;
        m.held_args = Some(args);
        m.held_aux = Some(aux);
        m.params_initialized = true;
        Ok(m)
    }

    /// [`load`](Self::load), then reads `prefix-%04d.states`, whose states apply at
    /// `init_optimizer`: MXNet's `Module.load(prefix, epoch, load_optimizer_states=True)`
    /// (which reads the file only then; here a bad file fails now).
    pub fn load_with_optimizer_states(
        prefix: &str,
        epoch: usize,
        opts: ModuleOptions,
    ) -> Result<Module> {
        let mut m = Module::load(prefix, epoch, opts)?;
        m.load_optimizer_states(&states_path(prefix, epoch))?;
        Ok(m)
    }

    /// Writes `prefix-symbol.json` and `prefix-%04d.params` (both atomically); MXNet's
    /// `save_optimizer_states=True` is a further
    /// [`save_optimizer_states`](Self::save_optimizer_states)`(&states_path(prefix, epoch))`.
    pub fn save_checkpoint(&self, prefix: &str, epoch: usize) -> Result<()> {
        json::save(&self.symbol, format!("{prefix}-symbol.json"))?;
        self.save_params(&params_path(prefix, epoch))
    }

    /// Writes the params as MXNet's dict (`arg:` keys in `param_names` order, then `aux:`).
    pub fn save_params(&self, path: &std::path::Path) -> Result<()> {
        let (args, aux) = self.get_params()?;
        let mut d = Vec::new();
        for n in &self.param_names {
            if let Some(v) = args.get(n) {
                d.push((format!("arg:{n}"), v.clone()));
            }
        }
        for n in &self.aux_names {
            if let Some(v) = aux.get(n) {
                d.push((format!("aux:{n}"), v.clone()));
            }
        }
        params_file::save(path, &NdList::Dict(d))
    }

    /// Loads a `.params` file into the bound module (like `set_params` with its contents).
    pub fn load_params(&mut self, path: &std::path::Path) -> Result<()> {
        let (args, aux) = load_params_file(path)?;
        self.set_params(InitOptions {
            arg_params: Some(args),
            aux_params: Some(aux),
            force_init: true,
            ..Default::default()
        })
    }

    /// The optimizer states by parameter index (copies).
    pub fn optimizer_states(&self) -> Result<OptStates> {
        if self.optimizer.is_none() {
            return Err(lifecycle("save_optimizer_states", "init_optimizer"));
        }
        Ok(self
            .states
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone())
    }

    /// Replaces the optimizer states (before `init_optimizer` they are kept until it runs).
    pub fn set_optimizer_states(&mut self, states: OptStates) -> Result<()> {
        if self.optimizer.is_some() {
            *self.states.lock().unwrap_or_else(|p| p.into_inner()) = states;
        } else {
            self.pending_states = Some(states);
        }
        Ok(())
    }

    /// Writes the optimizer states as MXNet's `.states` pickle, atomically (see [`states`]).
    pub fn save_optimizer_states(&self, path: &std::path::Path) -> Result<()> {
        let st = self.optimizer_states()?;
        states_file::save(path, &st).context("module.save_optimizer_states")
    }

    /// Reads a `.states` file (MXNet's or mxfn's) with the restricted reader of [`states`];
    /// the states replace the optimizer's now, or at `init_optimizer` when there is none yet.
    pub fn load_optimizer_states(&mut self, path: &std::path::Path) -> Result<()> {
        let st = states_file::load(path).context("module.load_optimizer_states")?;
        self.set_optimizer_states(st)
    }
}
