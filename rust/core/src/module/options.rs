//! The option structs of the Module lifecycle: `new`, `bind`, `init_params` / `set_params`
//! and `init_optimizer`. Defaults are MXNet 1.9.1's.

use super::*;

/// Options of [`Module::new`].
#[derive(Clone, Debug)]
pub struct ModuleOptions {
    /// Data input names (default `["data"]`).
    pub data_names: Vec<String>,
    /// Label input names (default `["softmax_label"]`); names the symbol lacks are dropped
    /// with a warning (SPEC §8).
    pub label_names: Vec<String>,
    /// Devices (default `[cpu(0)]`).
    pub contexts: Vec<Context>,
    /// Share of each batch per context (`None`: uniform).
    pub workload_list: Option<Vec<f64>>,
    /// Parameters that get no gradient and are never updated.
    pub fixed_param_names: Vec<String>,
}

impl Default for ModuleOptions {
    fn default() -> Self {
        ModuleOptions {
            data_names: vec!["data".into()],
            label_names: vec!["softmax_label".into()],
            contexts: vec![Context::cpu(0)],
            workload_list: None,
            fixed_param_names: vec![],
        }
    }
}

/// Gradient requests of [`BindOptions`]: one for every parameter, or per name.
#[derive(Clone, Debug)]
pub enum GradReqSpec {
    /// The same request for every (non-fixed) parameter.
    All(GradReq),
    /// Per parameter name (missing names get `write`).
    ByName(HashMap<String, GradReq>),
}

/// Options of [`Module::bind`].
///
/// MXNet's `shared_module` is a call rather than an option here: bind, then
/// [`Module::share_params_from`] the other module, and again whenever the other module has
/// changed its parameters (arrays are values; `mxfn.module.bind(shared_module=…)` does this
/// bookkeeping for Python users).
#[derive(Clone, Debug)]
pub struct BindOptions {
    /// Descs of the data inputs (whole-batch shapes), in `data_names` order.
    pub data_shapes: Vec<DataDesc>,
    /// Descs of the label inputs (empty: none).
    pub label_shapes: Vec<DataDesc>,
    /// Bind for training (gradients) — default true.
    pub for_training: bool,
    /// Compute gradients of the data inputs.
    pub inputs_need_grad: bool,
    /// Rebind a bound module.
    pub force_rebind: bool,
    /// Gradient requests (default `write`).
    pub grad_req: GradReqSpec,
}

impl Default for BindOptions {
    fn default() -> Self {
        BindOptions {
            data_shapes: vec![],
            label_shapes: vec![],
            for_training: true,
            inputs_need_grad: false,
            force_rebind: false,
            grad_req: GradReqSpec::All(GradReq::Write),
        }
    }
}

/// Options of [`Module::init_params`] and [`Module::set_params`].
#[derive(Clone, Debug, Default)]
pub struct InitOptions {
    /// The initializer (`None`: `uniform(0.01)`).
    pub initializer: Option<Initializer>,
    /// Given argument parameters.
    pub arg_params: Option<BTreeMap<String, NDArray>>,
    /// Given auxiliary states.
    pub aux_params: Option<BTreeMap<String, NDArray>>,
    /// Parameters missing from `arg_params` / `aux_params` are initialised instead of an error.
    pub allow_missing: bool,
    /// Re-initialise an initialised module.
    pub force_init: bool,
    /// Names that are not parameters of the module are ignored instead of an error.
    pub allow_extra: bool,
}

/// Options of [`Module::init_optimizer`].
#[derive(Clone, Debug)]
pub struct OptimizerInit {
    /// Set `rescale_grad = 1 / total batch` and the index→name map (default true).
    pub reset_optimizer: bool,
    /// Re-initialise when an optimizer is installed.
    pub force_init: bool,
}

impl Default for OptimizerInit {
    fn default() -> Self {
        OptimizerInit {
            reset_optimizer: true,
            force_init: false,
        }
    }
}
