//! `Module`: MXNet's intermediate-level Module API — bind a symbol on one or more contexts
//! (each gets its slice of the batch), initialise parameters, run forward / backward, apply an
//! optimizer through a "local" kvstore (gradients summed over contexts), and save / load
//! checkpoints in MXNet's file formats.
//!
//! ```
//! use mxfn_core::module::{BindOptions, InitOptions, Module, ModuleOptions};
//! use mxfn_core::io::{DataBatch, DataDesc};
//! use mxfn_core::symbol::Symbol;
//! use mxfn_core::{DType, NDArray};
//! let x = Symbol::variable("data");
//! let y = Symbol::create("FullyConnected", None, &[("num_hidden", "2")], vec![(None, x)]).unwrap();
//! let opts = ModuleOptions { label_names: vec![], ..Default::default() };
//! let mut m = Module::new(y, opts).unwrap();
//! m.bind(BindOptions { data_shapes: vec![DataDesc::new("data", &[4, 3])], for_training: false, ..Default::default() }).unwrap();
//! m.init_params(InitOptions::default()).unwrap();
//! let batch = DataBatch { data: vec![NDArray::ones(&[4, 3], DType::Float32)], ..Default::default() };
//! m.forward(&batch, None).unwrap();
//! assert_eq!(m.outputs_merged().unwrap()[0].shape(), &[4, 2]);
//! ```

use crate::error::{Error, Result, ResultExt};
use crate::executor::{Executor, GradReq};
use crate::initializer::Initializer;
use crate::io::{DataBatch, DataDesc};
use crate::kernels::par::PassPlacement;
use crate::kernels::tuning::INFERENCE_POOL_PASS_FROM;
use crate::metric::EvalMetric;
use crate::optimizer::Optimizer;
use crate::symbol::{json, Symbol};
use crate::tensor::params_file::{self, NdList};
use crate::{Context, NDArray};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

mod blocks;
pub mod bucketing;
mod checkpoint;
mod collective;
mod exec_group;
mod fit;
mod options;
mod params;
pub mod run_loop;

pub use checkpoint::{params_path, states_path};
pub use collective::{check_same_on_all, Collective, CommStats, ThreadGroup, DEFAULT_BUCKET_BYTES};
pub use exec_group::split_input_slice;
use exec_group::*;
pub use fit::*;
pub use options::*;
pub use params::load_params_file;

/// A call made too early: "module.forward: the module is not bound: call bind first".
fn lifecycle(call: &str, first: &str) -> Error {
    let why = match first {
        "bind" => ": the module is not bound",
        "init_params" => ": the parameters are not initialised",
        "init_optimizer" => ": no optimizer is installed",
        "forward" => ": there are no outputs yet",
        _ => "",
    };
    Error::Lifecycle {
        call: format!("module.{call}{why}"),
        first: first.into(),
    }
}

pub use crate::tensor::states_file::OptStates;

/// A symbol bound on one or more contexts, with parameters and an optimizer.
pub struct Module {
    symbol: Symbol,
    data_names: Vec<String>,
    label_names: Vec<String>,
    output_names: Vec<String>,
    param_names: Vec<String>,
    aux_names: Vec<String>,
    fixed: HashSet<String>,
    contexts: Vec<Context>,
    workload: Vec<f64>,
    binded: bool,
    for_training: bool,
    inputs_need_grad: bool,
    data_shapes: Vec<DataDesc>,
    label_shapes: Vec<DataDesc>,
    execs: Vec<Executor>,
    slices: Vec<(usize, usize)>,
    batch_size: usize,
    /// Params held before bind (a loaded checkpoint) or set after it.
    held_args: Option<BTreeMap<String, NDArray>>,
    held_aux: Option<BTreeMap<String, NDArray>>,
    params_initialized: bool,
    optimizer: Option<Arc<Mutex<Optimizer>>>,
    states: Arc<Mutex<OptStates>>,
    pending_states: Option<OptStates>,
    last_labels: Vec<NDArray>,
    forwarded: bool,
    /// Whether training passes run on the calling thread or on the pool (by their duration).
    placement: PassPlacement,
    /// The same for inference passes, which move to the pool sooner (see
    /// [`INFERENCE_POOL_PASS_FROM`]), the shorter ones where they measured faster.
    inference_placement: PassPlacement,
    warnings: Vec<String>,
    monitor: Option<MonitorFactory>,
    /// Raised by another thread to stop fit / score / predict between batches.
    interrupt: Option<Arc<AtomicBool>>,
    /// The workers of data-parallel training (see [`Module::set_collective`]).
    collective: Option<Arc<dyn Collective>>,
    /// Bucket size of the gradient sums over workers.
    bucket_bytes: usize,
    /// Reused buffer of the buckets that pack several arrays.
    fusion: Vec<f32>,
    /// The cost of the gradient sums so far.
    comm: CommStats,
    /// Parameters and auxiliary states whose arrays another bucket's module took over
    /// (see [`Module::assemble_params`]), with their bound shapes: their slots hold empty
    /// arrays until they are adopted back.
    vacant: BTreeMap<String, Vec<usize>>,
    /// The optimizer index of each parameter (by position in `param_names`); empty means
    /// the position itself. A BucketingModule gives every bucket one index per name.
    opt_index: Vec<usize>,
}

/// Makes one monitor callback per executor (installed again after every bind / reshape).
pub type MonitorFactory = Arc<dyn Fn() -> crate::executor::Monitor + Send + Sync>;

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Module(data={:?}, label={:?}, params={:?}, contexts={}, bound={})",
            self.data_names,
            self.label_names,
            self.param_names,
            self.contexts.len(),
            self.binded
        )
    }
}

impl Module {
    /// A new, unbound module over `symbol`.
    pub fn new(symbol: Symbol, opts: ModuleOptions) -> Result<Module> {
        let args = symbol.list_arguments();
        for d in &opts.data_names {
            if !args.contains(d) {
                return Err(Error::invalid(
                    "module: data_names",
                    format!("names of the symbol's arguments ({})", args.join(", ")),
                    format!("\"{d}\""),
                ));
            }
        }
        let mut label_names = Vec::new();
        let mut warnings = Vec::new();
        for l in opts.label_names {
            if args.contains(&l) {
                label_names.push(l);
            } else {
                warnings.push(format!(
                    "module: label name \"{l}\" is not an argument of the symbol; ignored"
                ));
            }
        }
        let inputs: HashSet<&String> = opts.data_names.iter().chain(&label_names).collect();
        let param_names: Vec<String> = args
            .iter()
            .filter(|a| !inputs.contains(a))
            .cloned()
            .collect();
        for f in &opts.fixed_param_names {
            if !param_names.contains(f) {
                return Err(Error::invalid(
                    "module: fixed_param_names",
                    format!("parameter names ({})", param_names.join(", ")),
                    format!("\"{f}\""),
                ));
            }
        }
        if opts.contexts.is_empty() {
            return Err(Error::invalid(
                "module: contexts",
                "at least one context",
                "[]",
            ));
        }
        let workload = match opts.workload_list {
            None => vec![1.0; opts.contexts.len()],
            Some(w) => {
                if w.len() != opts.contexts.len() || w.iter().any(|x| !(*x > 0.0 && x.is_finite()))
                {
                    return Err(Error::invalid(
                        "module: workload_list",
                        format!("{} positive numbers (one per context)", opts.contexts.len()),
                        format!("{w:?}"),
                    ));
                }
                w
            }
        };
        Ok(Module {
            output_names: symbol.list_outputs(),
            aux_names: symbol.list_auxiliary_states(),
            symbol,
            data_names: opts.data_names,
            label_names,
            param_names,
            fixed: opts.fixed_param_names.into_iter().collect(),
            contexts: opts.contexts,
            workload,
            binded: false,
            for_training: false,
            inputs_need_grad: false,
            data_shapes: vec![],
            label_shapes: vec![],
            execs: vec![],
            slices: vec![],
            batch_size: 0,
            held_args: None,
            held_aux: None,
            params_initialized: false,
            optimizer: None,
            states: Arc::new(Mutex::new(BTreeMap::new())),
            pending_states: None,
            interrupt: None,
            last_labels: vec![],
            forwarded: false,
            placement: PassPlacement::default(),
            inference_placement: PassPlacement::measured(INFERENCE_POOL_PASS_FROM),
            warnings,
            monitor: None,
            collective: None,
            bucket_bytes: DEFAULT_BUCKET_BYTES,
            fusion: Vec::new(),
            comm: CommStats::default(),
            vacant: BTreeMap::new(),
            opt_index: Vec::new(),
        })
    }

    /// The symbol.
    pub fn symbol(&self) -> &Symbol {
        &self.symbol
    }
    /// Data input names.
    pub fn data_names(&self) -> &[String] {
        &self.data_names
    }
    /// Label input names (those the symbol has).
    pub fn label_names(&self) -> &[String] {
        &self.label_names
    }
    /// Output names.
    pub fn output_names(&self) -> &[String] {
        &self.output_names
    }
    /// Parameter names: `list_arguments` minus data and label names (the optimizer's index order).
    pub fn param_names(&self) -> &[String] {
        &self.param_names
    }
    /// Auxiliary state names.
    pub fn aux_names(&self) -> &[String] {
        &self.aux_names
    }
    /// The contexts.
    pub fn contexts(&self) -> &[Context] {
        &self.contexts
    }
    /// Whether the module is bound.
    pub fn binded(&self) -> bool {
        self.binded
    }
    /// Whether the parameters are initialised.
    pub fn params_initialized(&self) -> bool {
        self.params_initialized
    }
    /// Whether an optimizer is installed.
    pub fn optimizer_initialized(&self) -> bool {
        self.optimizer.is_some()
    }
    /// Whether the module was bound for training.
    pub fn for_training(&self) -> bool {
        self.for_training
    }
    /// Data descs of the bind (or the last reshape).
    pub fn data_shapes(&self) -> Result<&[DataDesc]> {
        self.need_bound("data_shapes")?;
        Ok(&self.data_shapes)
    }
    /// Label descs of the bind (or the last reshape).
    pub fn label_shapes(&self) -> Result<&[DataDesc]> {
        self.need_bound("label_shapes")?;
        Ok(&self.label_shapes)
    }
    /// Output names and whole-batch shapes.
    pub fn output_shapes(&self) -> Result<Vec<(String, Vec<usize>)>> {
        self.need_bound("output_shapes")?;
        let known = self.input_shapes(&self.data_shapes, &self.label_shapes);
        let (_, outs, _) = self.symbol.infer_shape(&known)?;
        Ok(self.output_names.iter().cloned().zip(outs).collect())
    }
    /// Warnings recorded since the last call (ignored calls, dropped label names); the
    /// Python layer logs them.
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    /// The installed optimizer (shared).
    pub fn optimizer(&self) -> Option<Arc<Mutex<Optimizer>>> {
        self.optimizer.clone()
    }

    fn need_bound(&self, call: &str) -> Result<()> {
        if self.binded {
            Ok(())
        } else {
            Err(lifecycle(call, "bind"))
        }
    }

    fn need_params(&self, call: &str) -> Result<()> {
        self.need_bound(call)?;
        if self.params_initialized {
            Ok(())
        } else {
            Err(lifecycle(call, "init_params"))
        }
    }

    fn input_shapes(&self, data: &[DataDesc], label: &[DataDesc]) -> HashMap<String, Vec<usize>> {
        data.iter()
            .chain(label.iter().filter(|d| self.label_names.contains(&d.name)))
            .map(|d| (d.name.clone(), d.shape.clone()))
            .collect()
    }

    fn check_descs(&self, call: &str, data: &[DataDesc], label: &[DataDesc]) -> Result<()> {
        let names: Vec<&String> = data.iter().map(|d| &d.name).collect();
        let want: Vec<&String> = self.data_names.iter().collect();
        if names != want {
            return Err(Error::invalid(
                format!("module.{call}: data_shapes"),
                format!("descs named {:?} (the module's data_names, in order)", want),
                format!("{names:?}"),
            ));
        }
        let sizes: Vec<usize> = data
            .iter()
            .chain(label.iter().filter(|d| self.label_names.contains(&d.name)))
            .filter_map(|d| d.batch_axis().and_then(|a| d.shape.get(a).copied()))
            .collect();
        if let Some(&first) = sizes.first() {
            if sizes.iter().any(|&s| s != first) {
                return Err(Error::invalid(
                    format!("module.{call}: shapes"),
                    "one batch size along every input's batch axis",
                    format!("{sizes:?}"),
                ));
            }
        }
        Ok(())
    }

    fn batch_of(data: &[DataDesc]) -> usize {
        data.iter()
            .find_map(|d| d.batch_axis().and_then(|a| d.shape.get(a).copied()))
            .unwrap_or(0)
    }

    /// Binds one executor per context on its slice of the batch. A bound module is left as it
    /// is unless `force_rebind`.
    pub fn bind(&mut self, opts: BindOptions) -> Result<()> {
        if let Some(c) = self.contexts.iter().find(|c| c.dev_type == 2) {
            return Err(Error::invalid(
                "module.bind: contexts",
                "cpu contexts (this build has no GPU backend)",
                format!("gpu({})", c.dev_id),
            ));
        }
        if self.binded && !opts.force_rebind {
            self.warnings.push(
                "module.bind: already bound; ignoring (pass force_rebind to rebind)".to_string(),
            );
            return Ok(());
        }
        let label: Vec<DataDesc> = opts
            .label_shapes
            .into_iter()
            .filter(|d| self.label_names.contains(&d.name))
            .collect();
        self.check_descs("bind", &opts.data_shapes, &label)?;
        let batch = Self::batch_of(&opts.data_shapes);
        if batch == 0 {
            let shapes: Vec<String> = opts
                .data_shapes
                .iter()
                .map(|d| {
                    format!(
                        "{}: {}",
                        d.name,
                        crate::error::tuple_text(&format!("{:?}", d.shape))
                    )
                })
                .collect();
            return Err(Error::invalid(
                "module.bind: data_shapes",
                "a batch of at least 1 sample along the batch axis (axis N of the layout)",
                format!("[{}]", shapes.join(", ")),
            ));
        }
        let slices = split_input_slice(batch, &self.workload)?;
        // Keep current parameter values across a rebind.
        if self.binded && self.params_initialized {
            self.sync_to_held();
        }
        let mut reqs: HashMap<String, GradReq> = HashMap::new();
        for n in self.symbol.list_arguments() {
            let r = if !opts.for_training {
                GradReq::Null
            } else if self.data_names.contains(&n) {
                if opts.inputs_need_grad {
                    GradReq::Write
                } else {
                    GradReq::Null
                }
            } else if self.label_names.contains(&n) || self.fixed.contains(&n) {
                GradReq::Null
            } else {
                match &opts.grad_req {
                    GradReqSpec::All(r) => *r,
                    GradReqSpec::ByName(m) => m.get(&n).copied().unwrap_or(GradReq::Write),
                }
            };
            reqs.insert(n, r);
        }
        let dtypes: HashMap<String, crate::DType> = opts
            .data_shapes
            .iter()
            .chain(&label)
            .map(|d| (d.name.clone(), d.dtype))
            .collect();
        let shapes = self.sliced_shapes(&opts.data_shapes, &label, &slices);
        let mut execs = Vec::with_capacity(self.contexts.len());
        for (ctx, s) in self.contexts.iter().zip(&shapes) {
            execs.push(Executor::simple_bind(
                &self.symbol,
                *ctx,
                s,
                &dtypes,
                &reqs,
                GradReq::Null,
            )?);
        }
        self.execs = execs;
        self.apply_monitor();
        self.slices = slices;
        self.batch_size = batch;
        self.data_shapes = opts.data_shapes;
        self.label_shapes = label;
        self.for_training = opts.for_training;
        self.inputs_need_grad = opts.inputs_need_grad;
        let (data, label) = (self.data_shapes.clone(), self.label_shapes.clone());
        self.set_inference_blocks(&data, &label);
        self.binded = true;
        self.forwarded = false;
        if self.params_initialized {
            let (a, x) = (self.held_args.take(), self.held_aux.take());
            let r = self.write_params(a.as_ref(), x.as_ref(), true, true);
            if r.is_err() {
                self.binded = false;
                self.execs.clear();
            }
            self.held_args = a;
            self.held_aux = x;
            r?;
        }
        Ok(())
    }

    /// Installs `optimizer` (shared). With `reset_optimizer`, sets `rescale_grad = 1/batch`
    /// (the total over all contexts, times the number of workers of a
    /// [collective](Self::set_collective)) and the index→name map (index = position in
    /// [`param_names`](Self::param_names)). With several workers, first checks that they
    /// hold the same parameters and gives them rank 0's values.
    pub fn init_optimizer(
        &mut self,
        optimizer: Arc<Mutex<Optimizer>>,
        opts: OptimizerInit,
    ) -> Result<()> {
        if self.optimizer.is_some() && !opts.force_init {
            self.warnings.push(
                "module.init_optimizer: optimizer already initialised; ignoring (pass force_init)"
                    .to_string(),
            );
            return Ok(());
        }
        self.need_params("init_optimizer")?;
        // Every worker starts from rank 0's parameters (MXNet's kvstore init + pull).
        self.broadcast_params("module.init_optimizer")?;
        {
            // The symbol's __lr_mult__ / __wd_mult__ attributes apply to every optimizer the
            // module gets, one made by name or a value (under the multipliers it was given).
            let (lr, wd) = self.symbol_mults()?;
            lock_opt(&optimizer).merge_symbol_mults(lr, wd)?;
        }
        if opts.reset_optimizer {
            let mut o = lock_opt(&optimizer);
            // The gradients are summed over the devices and the workers: MXNet's Module
            // rescales by 1 / (batch × num_workers) under a dist kvstore.
            let total = self.batch_size.max(1) * self.num_workers();
            o.set_rescale_grad(1.0 / total as f64)?;
            o.set_idx2name(
                self.param_names
                    .iter()
                    .enumerate()
                    .map(|(i, n)| (self.opt_idx(i), n.clone()))
                    .collect::<BTreeMap<usize, String>>(),
            );
        }
        self.optimizer = Some(optimizer);
        self.states = Arc::new(Mutex::new(self.pending_states.take().unwrap_or_default()));
        Ok(())
    }

    /// The `__lr_mult__` / `__wd_mult__` attributes of the symbol's arguments (MXNet's
    /// `sym_info`), by name; a value that is not a number is an error naming the variable.
    fn symbol_mults(&self) -> Result<(BTreeMap<String, f64>, BTreeMap<String, f64>)> {
        let attrs = self.symbol.attr_dict();
        let (mut lr, mut wd) = (BTreeMap::new(), BTreeMap::new());
        for name in self.symbol.list_arguments() {
            let Some(a) = attrs.get(&name) else { continue };
            for (key, out) in [("__lr_mult__", &mut lr), ("__wd_mult__", &mut wd)] {
                if let Some(v) = a.get(key) {
                    let m = v.trim().parse::<f64>().map_err(|_| {
                        Error::invalid(
                            format!("module.init_optimizer: attribute {key} of \"{name}\""),
                            "a number",
                            format!("\"{v}\""),
                        )
                    })?;
                    out.insert(name.clone(), m);
                }
            }
        }
        Ok((lr, wd))
    }

    /// Shares `other`'s optimizer and its states (and its workers: a bucket's module sums its
    /// gradients over the same collective).
    pub fn borrow_optimizer(&mut self, other: &Module) -> Result<()> {
        let o = other
            .optimizer
            .clone()
            .ok_or_else(|| lifecycle("borrow_optimizer", "init_optimizer on the shared module"))?;
        self.optimizer = Some(o);
        self.states = other.states.clone();
        self.collective = other.collective.clone();
        self.bucket_bytes = other.bucket_bytes;
        self.register_with_optimizer()
    }

    /// Runs forward on every device with its slice of the batch; a batch whose shapes differ
    /// from the bound ones reshapes the module first. `is_train = None` means `for_training`.
    pub fn forward(&mut self, batch: &DataBatch, is_train: Option<bool>) -> Result<()> {
        self.forward_placed(batch, is_train, true)
    }

    /// [`forward`](Self::forward); `place`: whether this pass chooses its thread (see
    /// [`PassPlacement`]), or runs where it is called (inside `forward_backward`'s pass).
    fn forward_placed(
        &mut self,
        batch: &DataBatch,
        is_train: Option<bool>,
        place: bool,
    ) -> Result<()> {
        self.need_bound("forward")?;
        self.need_params("forward")?;
        if batch.data.len() != self.data_names.len() {
            return Err(Error::invalid(
                "module.forward: data_batch.data",
                format!(
                    "{} arrays ({})",
                    self.data_names.len(),
                    self.data_names.join(", ")
                ),
                format!("{} arrays", batch.data.len()),
            ));
        }
        let labels: Vec<NDArray> = if self.label_names.is_empty() {
            vec![]
        } else {
            batch
                .label
                .iter()
                .take(self.label_names.len())
                .cloned()
                .collect()
        };
        // Reshape when the batch's shapes differ from the bound ones.
        let new_data: Vec<DataDesc> = self
            .data_shapes
            .iter()
            .zip(&batch.data)
            .map(|(d, a)| DataDesc {
                shape: a.shape().to_vec(),
                ..d.clone()
            })
            .collect();
        let differs = new_data
            .iter()
            .zip(&self.data_shapes)
            .any(|(a, b)| a.shape != b.shape);
        let label_differs = labels.len() == self.label_shapes.len()
            && labels
                .iter()
                .zip(&self.label_shapes)
                .any(|(a, d)| a.shape() != d.shape.as_slice());
        if differs || label_differs {
            let new_label: Vec<DataDesc> = if labels.len() == self.label_shapes.len() {
                self.label_shapes
                    .iter()
                    .zip(&labels)
                    .map(|(d, a)| DataDesc {
                        shape: a.shape().to_vec(),
                        ..d.clone()
                    })
                    .collect()
            } else {
                let nb = Self::batch_of(&new_data);
                self.label_shapes
                    .iter()
                    .map(|d| {
                        let mut d = d.clone();
                        if let Some(ax) = d.batch_axis() {
                            if ax < d.shape.len() {
                                d.shape[ax] = nb;
                            }
                        }
                        d
                    })
                    .collect()
            };
            self.reshape(new_data, new_label)?;
        }
        let is_train = is_train.unwrap_or(self.for_training);
        let data_descs = self.data_shapes.clone();
        let label_descs = self.label_shapes.clone();
        for (k, exe) in self.execs.iter_mut().enumerate() {
            let (b, e) = self.slices[k];
            for (d, a) in data_descs.iter().zip(&batch.data) {
                exe.set_arg(&d.name, slice_batch(a, d, b, e)?)?;
            }
            for (d, a) in label_descs.iter().zip(&labels) {
                exe.set_arg(&d.name, slice_batch(a, d, b, e)?)?;
            }
        }
        // Devices run side by side on the pool. One device runs on the calling thread (rayon
        // runs a one-item iterator inline) and its parallel kernels hand work to the pool; a
        // long pass enters the pool once instead (see `PassPlacement`): a network of small
        // layers (MobileNet at batch 16) handed over and back per layer spent a fifth of its
        // time in the threads' sleeps and wake-ups; inside, the other threads stay awake for
        // the pass (MobileNetV2 at batch 1 still woke one per layer).
        let run = |execs: &mut [Executor]| -> Vec<Result<()>> {
            use rayon::prelude::*;
            execs
                .par_iter_mut()
                .map(|exe| exe.forward(is_train))
                .collect()
        };
        let results = if place {
            let execs = &mut self.execs;
            let placement = if is_train {
                &mut self.placement
            } else {
                &mut self.inference_placement
            };
            placement.run(|| run(execs))
        } else {
            run(&mut self.execs)
        };
        for r in results {
            r?;
        }
        self.last_labels = labels;
        self.forwarded = true;
        Ok(())
    }

    /// Back-propagates on every device. `out_grads`: one whole-batch array per output
    /// (empty for loss outputs).
    pub fn backward(&mut self, out_grads: &[NDArray]) -> Result<()> {
        self.need_bound("backward")?;
        if !self.for_training {
            return Err(lifecycle("backward", "bind with for_training=true"));
        }
        if !self.forwarded {
            return Err(lifecycle("backward", "forward"));
        }
        let mut per_dev: Vec<Vec<NDArray>> = vec![vec![]; self.execs.len()];
        let axes = self.output_batch_axes();
        for (i, g) in out_grads.iter().enumerate() {
            let axis = axes.get(i).copied().unwrap_or(Some(0));
            for (k, &(b, e)) in self.slices.iter().enumerate() {
                let s = match axis {
                    Some(ax) if self.execs.len() > 1 => {
                        g.slice_axis(ax as isize, b as isize, Some(e as isize))?
                    }
                    _ => g.clone(),
                };
                per_dev[k].push(s);
            }
        }
        let results: Vec<Result<()>> = {
            use rayon::prelude::*;
            self.execs
                .par_iter_mut()
                .zip(per_dev.par_iter())
                .map(|(exe, g)| exe.backward(g))
                .collect()
        };
        for r in results {
            r?;
        }
        Ok(())
    }

    /// `forward(batch, is_train=true)` then `backward()`.
    pub fn forward_backward(&mut self, batch: &DataBatch) -> Result<()> {
        // A long pass (LeNet) runs on the pool as a whole: its many parallel kernels then
        // split work among the pool's threads without a hand-over from this thread each
        // (LeNet training 5% faster). A short one stays here: its kernels are serial, and the
        // caller's next steps (update, metric) would run beside the pool's threads spinning
        // down (MLP training ran 3x slower so).
        let mut placement = self.placement;
        let r = placement.run(|| {
            self.forward_placed(batch, Some(true), false)?;
            self.backward(&[])
        });
        self.placement = placement;
        r
    }

    /// Sums every non-fixed parameter's gradient over the devices (and over the workers of a
    /// [collective](Self::set_collective)), applies the optimizer once (index = position in
    /// `param_names`) and copies the new weight to every device.
    pub fn update(&mut self) -> Result<()> {
        self.need_bound("update")?;
        self.need_params("update")?;
        let opt = self
            .optimizer
            .clone()
            .ok_or_else(|| lifecycle("update", "init_optimizer"))?;
        if let Some(c) = self.distributed() {
            return self.update_distributed(c.as_ref(), &opt);
        }
        let mut o = lock_opt(&opt);
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        for (i, name) in self.param_names.iter().enumerate() {
            if self.fixed.contains(name) {
                continue;
            }
            let index = self.opt_idx(i);
            let mut grad: Option<NDArray> = None;
            for exe in &self.execs {
                if let Some(g) = exe.grad(name)? {
                    grad = Some(match grad {
                        None => g.clone(),
                        Some(acc) => acc.add(g)?,
                    });
                }
            }
            let grad = match grad {
                Some(g) => g,
                None => continue,
            };
            // Updated in place on the first device (one device: no copy at all), then shared
            // with the others.
            collective::apply_one(&mut self.execs, &mut o, &mut states, index, name, &grad)?;
        }
        Ok(())
    }

    /// Accumulates `metric` on the last outputs, device by device, with `labels` (whole batch)
    /// sliced like the data.
    pub fn update_metric(&self, metric: &mut EvalMetric, labels: &[NDArray]) -> Result<()> {
        self.need_bound("update_metric")?;
        if !self.forwarded {
            return Err(lifecycle("update_metric", "forward"));
        }
        for (exe, ls) in self.execs.iter().zip(self.device_labels(labels)?) {
            metric.update(&ls, exe.outputs())?;
        }
        Ok(())
    }

    /// Sets the flag that stops a running `fit`, `score` or `predict` between batches with
    /// [`Error::Interrupted`] once another thread raises it (`None`: not interruptible).
    pub fn set_interrupt(&mut self, flag: Option<Arc<AtomicBool>>) {
        self.interrupt = flag;
    }

    /// `Err(Interrupted)` once the interrupt flag is raised.
    pub(super) fn check_interrupt(&self, call: &str) -> Result<()> {
        match &self.interrupt {
            Some(flag) if flag.load(Ordering::Relaxed) => Err(Error::Interrupted {
                call: format!("module.{call}"),
            }),
            _ => Ok(()),
        }
    }

    /// Installs a monitor on every executor (now and after each bind / reshape); `None`
    /// removes it. The callback gets `(name, array)` for op outputs, as the executor gives them.
    pub fn install_monitor(&mut self, monitor: Option<MonitorFactory>) {
        self.monitor = monitor;
        self.apply_monitor();
    }

    fn apply_monitor(&mut self) {
        for exe in &mut self.execs {
            exe.set_monitor(self.monitor.as_ref().map(|f| f()));
        }
    }

    /// Rebinds the executors for new input shapes, keeping the parameters (and the rescale
    /// of the original bind).
    pub fn reshape(
        &mut self,
        data_shapes: Vec<DataDesc>,
        label_shapes: Vec<DataDesc>,
    ) -> Result<()> {
        self.need_bound("reshape")?;
        let label: Vec<DataDesc> = label_shapes
            .into_iter()
            .filter(|d| self.label_names.contains(&d.name))
            .collect();
        self.check_descs("reshape", &data_shapes, &label)?;
        let batch = Self::batch_of(&data_shapes);
        let slices = split_input_slice(batch, &self.workload)?;
        let shapes = self.sliced_shapes(&data_shapes, &label, &slices);
        let mut execs = Vec::with_capacity(self.execs.len());
        for (exe, s) in self.execs.iter().zip(&shapes) {
            execs.push(exe.reshape(s)?);
        }
        self.execs = execs;
        self.apply_monitor();
        self.slices = slices;
        self.batch_size = batch;
        self.data_shapes = data_shapes;
        self.label_shapes = label;
        self.forwarded = false;
        let (data, label) = (self.data_shapes.clone(), self.label_shapes.clone());
        self.set_inference_blocks(&data, &label);
        Ok(())
    }
}

fn lock_opt(o: &Arc<Mutex<Optimizer>>) -> MutexGuard<'_, Optimizer> {
    o.lock().unwrap_or_else(|p| p.into_inner())
}
