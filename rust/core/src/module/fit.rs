//! fit / score / predict over core iterators (MXNet's `BaseModule.fit`, `score`, `predict`):
//! the Module's steps of the one fit and score loops of [`super::run_loop`], which give
//! MXNet's order (batch-end callbacks after each batch; at the end of an epoch the training
//! metric, the parameter sync, the epoch-end callbacks, then the validation pass).

use super::run_loop::{fit_loop, score_loop, FitSteps, ScoreSteps};
use super::*;
use crate::kernels::par::on_pool;

/// What a batch-end callback of [`Module::fit`] sees: the epoch, the 0-based batch number and
/// the training metric so far.
#[derive(Debug)]
pub struct BatchEndParam<'a> {
    /// The epoch being trained.
    pub epoch: usize,
    /// The batch just run (0-based).
    pub nbatch: usize,
    /// The training metric, accumulated since the start of the epoch.
    pub eval_metric: &'a EvalMetric,
}

/// Called after every training batch of [`Module::fit`].
pub type BatchEndCallback = Box<dyn FnMut(&BatchEndParam<'_>) + Send>;

/// Called at the end of every epoch of [`Module::fit`] with the epoch number and the module
/// (e.g. to save a checkpoint), as MXNet calls `epoch_end_callback(epoch, symbol, arg_params,
/// aux_params)`: after the training metric is final and the parameters are synced, before the
/// validation pass.
pub type EpochEndCallback = Box<dyn FnMut(usize, &Module) -> Result<()> + Send>;

/// One epoch of [`Module::fit`]: the training metric (global values over the epoch), the
/// validation metric (empty without `eval` data) and the wall time of the training part.
#[derive(Clone, Debug, PartialEq)]
pub struct EpochRecord {
    /// The epoch number.
    pub epoch: usize,
    /// `[(name, value)]` of the training metric.
    pub train: Vec<(String, f64)>,
    /// `[(name, value)]` of the validation metric (empty without evaluation data).
    pub validation: Vec<(String, f64)>,
    /// Seconds spent training the epoch (MXNet's `Time cost`).
    pub seconds: f64,
}

/// Options of [`Module::fit`] (MXNet's `fit` keywords; defaults are MXNet's).
pub struct FitOptions {
    /// Train until this epoch number, exclusive (default 1).
    pub num_epoch: usize,
    /// The first epoch number (default 0). A resumed fit uses `optimizer` as given: create it
    /// with `begin_num_update` = begin_epoch × batches per epoch so learning-rate schedules
    /// continue (Python's `fit` does this itself for an optimizer given by name).
    pub begin_epoch: usize,
    /// The training metric (default accuracy).
    pub eval_metric: EvalMetric,
    /// The validation metric (default: a fresh copy of `eval_metric`).
    pub validation_metric: Option<EvalMetric>,
    /// The optimizer (default SGD with learning rate 0.01); the module sets its
    /// `rescale_grad` to 1 / batch size (see `reset_optimizer`).
    pub optimizer: Option<Optimizer>,
    /// Set the optimizer's `rescale_grad` and index→name map at `init_optimizer` (default true).
    pub reset_optimizer: bool,
    /// The initializer of the parameters (default `uniform(0.01)`).
    pub initializer: Option<Initializer>,
    /// Given argument parameters (the rest are initialised when `allow_missing`).
    pub arg_params: Option<BTreeMap<String, NDArray>>,
    /// Given auxiliary states.
    pub aux_params: Option<BTreeMap<String, NDArray>>,
    /// Parameters missing from `arg_params` / `aux_params` are initialised.
    pub allow_missing: bool,
    /// Rebind a bound module.
    pub force_rebind: bool,
    /// Re-initialise the parameters of an initialised module.
    pub force_init: bool,
    /// Called after every training batch.
    pub batch_end_callback: Option<BatchEndCallback>,
    /// Called after every epoch's training, before its validation pass.
    pub epoch_end_callback: Option<EpochEndCallback>,
    /// Called after every validation batch with the validation metric so far.
    pub eval_batch_end_callback: Option<BatchEndCallback>,
    /// Called after every validation pass with the validation metric (MXNet's
    /// `eval_end_callback`).
    pub eval_end_callback: Option<BatchEndCallback>,
}

impl Default for FitOptions {
    fn default() -> Self {
        FitOptions {
            num_epoch: 1,
            begin_epoch: 0,
            eval_metric: EvalMetric::accuracy(1),
            validation_metric: None,
            optimizer: None,
            reset_optimizer: true,
            initializer: None,
            arg_params: None,
            aux_params: None,
            allow_missing: false,
            force_rebind: false,
            force_init: false,
            batch_end_callback: None,
            epoch_end_callback: None,
            eval_batch_end_callback: None,
            eval_end_callback: None,
        }
    }
}

impl std::fmt::Debug for FitOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FitOptions")
            .field("num_epoch", &self.num_epoch)
            .field("begin_epoch", &self.begin_epoch)
            .field("eval_metric", &self.eval_metric)
            .field("validation_metric", &self.validation_metric)
            .field("optimizer", &self.optimizer)
            .field("reset_optimizer", &self.reset_optimizer)
            .field("initializer", &self.initializer)
            .field("allow_missing", &self.allow_missing)
            .field("force_rebind", &self.force_rebind)
            .field("force_init", &self.force_init)
            .finish_non_exhaustive()
    }
}

/// The first `n - pad` samples (axis 0) of every array.
pub(super) fn unpad(arrays: Vec<NDArray>, pad: usize) -> Result<Vec<NDArray>> {
    if pad == 0 {
        return Ok(arrays);
    }
    arrays
        .into_iter()
        .map(|a| {
            let n = a.shape().first().copied().unwrap_or(0);
            a.slice_axis(0, 0, Some(n.saturating_sub(pad) as isize))
        })
        .collect()
}

impl Module {
    /// The batch axis of every output (MXNet's `output_layouts`): where the `__layout__`
    /// attribute of the output's node has `N`; 0 without the attribute; `None` for a layout
    /// without `N` (every device computes the whole output).
    pub fn output_batch_axes(&self) -> Vec<Option<usize>> {
        self.symbol
            .heads
            .iter()
            .map(|e| match e.node.attrs.get("__layout__") {
                None => Some(0),
                Some(l) => l.find('N'),
            })
            .collect()
    }

    /// Trains the module (MXNet's `Module.fit`): binds for training with the shapes of
    /// `train` (nothing happens on a bound module unless `force_rebind`), initialises the
    /// parameters and installs the optimizer (both left alone when already done, unless
    /// `force_init`), then for every epoch in `begin_epoch..num_epoch`: resets `train` (epoch 0
    /// included) and the metric, runs `forward_backward`, `update` and `update_metric` on every
    /// batch, and with `eval` data scores it (reset first) with the validation metric.
    /// With several contexts the averaged parameters are written back to every device after
    /// each epoch, as MXNet does. Returns one [`EpochRecord`] per epoch run.
    ///
    /// ```
    /// use mxfn_core::io::{DataIter, NDArrayIter, NDArrayIterOptions};
    /// use mxfn_core::module::{FitOptions, Module, ModuleOptions};
    /// use mxfn_core::optimizer::{create, Hyper, OptimizerOptions};
    /// use mxfn_core::symbol::Symbol;
    /// use mxfn_core::NDArray;
    /// let fc = Symbol::create("FullyConnected", Some("fc"), &[("num_hidden", "2")],
    ///                         vec![(None, Symbol::variable("data"))]).unwrap();
    /// let net = Symbol::create("SoftmaxOutput", Some("softmax"), &[], vec![(None, fc)]).unwrap();
    /// let x: Vec<f32> = (0..40).map(|i| if i % 4 < 2 { 1.0 } else { -1.0 } * (i % 2) as f32).collect();
    /// let y: Vec<f32> = (0..20).map(|i| (i % 2) as f32).collect();
    /// let opts = NDArrayIterOptions { batch_size: 5, ..Default::default() };
    /// let mut train = NDArrayIter::new(
    ///     vec![("data".into(), NDArray::from_f32(&[20, 2], x).unwrap())],
    ///     vec![("softmax_label".into(), NDArray::from_f32(&[20], y).unwrap())], opts).unwrap();
    /// let sgd = create("sgd", OptimizerOptions::default(), [("learning_rate", Hyper::Num(0.5))]).unwrap();
    /// let mut m = Module::new(net, ModuleOptions::default()).unwrap();
    /// let hist = m.fit(&mut train, None, FitOptions { num_epoch: 2, optimizer: Some(sgd), ..Default::default() }).unwrap();
    /// assert_eq!(hist.len(), 2);
    /// assert_eq!(hist[1].train[0].0, "accuracy");
    /// let out = m.predict(&mut train, None).unwrap();
    /// assert_eq!(out[0].shape(), &[20, 2]);
    /// ```
    pub fn fit(
        &mut self,
        train: &mut dyn crate::io::DataIter,
        eval: Option<&mut dyn crate::io::DataIter>,
        opts: FitOptions,
    ) -> Result<Vec<EpochRecord>> {
        let FitOptions {
            num_epoch,
            begin_epoch,
            eval_metric,
            validation_metric,
            optimizer,
            reset_optimizer,
            initializer,
            arg_params,
            aux_params,
            allow_missing,
            force_rebind,
            force_init,
            batch_end_callback,
            epoch_end_callback,
            eval_batch_end_callback,
            eval_end_callback,
        } = opts;
        self.bind(BindOptions {
            data_shapes: train.provide_data(),
            label_shapes: train.provide_label(),
            for_training: true,
            force_rebind,
            ..Default::default()
        })?;
        self.init_params(InitOptions {
            initializer,
            arg_params,
            aux_params,
            allow_missing,
            force_init,
            allow_extra: false,
        })?;
        let optimizer = match optimizer {
            Some(o) => o,
            None => crate::optimizer::create(
                "sgd",
                crate::optimizer::OptimizerOptions {
                    learning_rate: Some(0.01),
                    ..Default::default()
                },
                [] as [(&str, crate::optimizer::Hyper); 0],
            )?,
        };
        self.init_optimizer(
            Arc::new(Mutex::new(optimizer)),
            OptimizerInit {
                reset_optimizer,
                force_init: false,
            },
        )?;
        let mut steps = CoreFit {
            validation_metric: validation_metric.unwrap_or_else(|| eval_metric.clone()),
            module: self,
            train,
            eval,
            eval_metric,
            batch_end_callback,
            epoch_end_callback,
            eval_batch_end_callback,
            eval_end_callback,
            records: Vec::new(),
        };
        fit_loop(&mut steps, begin_epoch..num_epoch)?;
        Ok(steps.records)
    }

    /// Evaluates `metric` (reset first) over `eval` (reset first), at most `num_batch`
    /// batches (`None`: all), with `forward(is_train=false)`. Padded samples of a batch are
    /// excluded from the metric. Returns the metric's `[(name, value)]` (pooled over the
    /// workers of a [collective](Module::set_collective)).
    pub fn score(
        &mut self,
        eval: &mut dyn crate::io::DataIter,
        metric: &mut EvalMetric,
        num_batch: Option<usize>,
    ) -> Result<Vec<(String, f64)>> {
        self.score_batches(eval, metric, num_batch, 0, None)?;
        // With several workers, each scored its part: the value is the pooled one.
        self.pooled_metric(metric, false)
    }

    /// `score`'s pass: the number of batches run; `batch_end` is called after each with
    /// `epoch` and the metric so far.
    fn score_batches(
        &mut self,
        eval: &mut dyn crate::io::DataIter,
        metric: &mut EvalMetric,
        num_batch: Option<usize>,
        epoch: usize,
        batch_end: Option<&mut BatchEndCallback>,
    ) -> Result<usize> {
        self.need_params("score")?;
        eval.reset()?;
        metric.reset();
        on_pool(|| {
            let mut steps = CoreScore {
                module: self,
                eval,
                metric,
                epoch,
                batch_end,
            };
            score_loop(&mut steps, num_batch)
        })
    }

    /// The outputs of every batch of `eval` (reset first; at most `num_batch` batches, `None`:
    /// all), merged over the devices, with the padded samples removed:
    /// `[[out1_b1, out2_b1, …], [out1_b2, …], …]`.
    pub fn predict_every_batch(
        &mut self,
        eval: &mut dyn crate::io::DataIter,
        num_batch: Option<usize>,
    ) -> Result<Vec<Vec<NDArray>>> {
        self.need_params("predict")?;
        eval.reset()?;
        on_pool(|| {
            let wanted = |n: usize| num_batch.is_none_or(|k| n < k);
            let mut out = Vec::new();
            // One device: batches go two at a time, one per thread, the first through a twin
            // executor sharing the parameters (see `forward_pair`).
            let pairs = self.execs.len() == 1
                && rayon::current_num_threads() > 1
                && self.execs.iter().all(|e| !e.has_monitor());
            let mut twin: Option<Executor> = None;
            while wanted(out.len()) {
                let Some(first) = eval.next_batch()? else {
                    break;
                };
                self.check_interrupt("predict")?;
                let second = if pairs && wanted(out.len() + 1) {
                    eval.next_batch()?
                } else {
                    None
                };
                match second {
                    Some(second)
                        if self.has_bound_shapes(&first) && self.has_bound_shapes(&second) =>
                    {
                        let twin = match &mut twin {
                            Some(t) => t,
                            None => twin.insert(self.execs[0].inference_twin()?),
                        };
                        self.forward_pair(twin, &first, &second)?;
                        out.push(unpad(twin.outputs().to_vec(), first.pad)?);
                        out.push(unpad(self.outputs_merged()?, second.pad)?);
                    }
                    second => {
                        for batch in std::iter::once(first).chain(second) {
                            self.forward(&batch, Some(false))?;
                            out.push(unpad(self.outputs_merged()?, batch.pad)?);
                        }
                    }
                }
            }
            Ok(out)
        })
    }

    /// Whether `batch`'s data (and labels, when it has them) have the bound shapes.
    pub(super) fn has_bound_shapes(&self, batch: &DataBatch) -> bool {
        let same = |descs: &[DataDesc], arrays: &[NDArray]| {
            descs
                .iter()
                .zip(arrays)
                .all(|(d, a)| a.shape() == d.shape.as_slice())
        };
        batch.data.len() == self.data_shapes.len()
            && same(&self.data_shapes, &batch.data)
            && (batch.label.len() < self.label_names.len()
                || same(&self.label_shapes, &batch.label))
    }

    /// Inference on two batches of the bound shapes at once with one device: `first` through
    /// `twin` (an inference copy of the executor sharing its parameters) and `second` through
    /// the module's own executor, side by side on two threads. Both threads are busy with a
    /// whole pass instead of waiting for each other at every split kernel (a GEMM band that
    /// nobody steals runs on the thread that made it): MLP inference in batches of 1000 went
    /// from 1.25M to 1.66M samples/s. The module ends as if it had run the two batches in
    /// order (outputs and labels of `second`).
    pub(super) fn forward_pair(
        &mut self,
        twin: &mut Executor,
        first: &DataBatch,
        second: &DataBatch,
    ) -> Result<()> {
        let labels = |b: &DataBatch| -> Vec<NDArray> {
            if self.label_names.is_empty() {
                vec![]
            } else {
                b.label
                    .iter()
                    .take(self.label_names.len())
                    .cloned()
                    .collect()
            }
        };
        let (l1, l2) = (labels(first), labels(second));
        let set = |exe: &mut Executor, b: &DataBatch, l: &[NDArray]| -> Result<()> {
            for (d, a) in self.data_shapes.iter().zip(&b.data) {
                exe.set_arg(&d.name, a.clone())?;
            }
            for (d, a) in self.label_shapes.iter().zip(l) {
                exe.set_arg(&d.name, a.clone())?;
            }
            Ok(())
        };
        let own = &mut self.execs[0];
        set(twin, first, &l1)?;
        set(own, second, &l2)?;
        let (a, b) = rayon::join(|| twin.forward(false), || own.forward(false));
        a.and(b)?;
        self.last_labels = l2;
        self.forwarded = true;
        Ok(())
    }

    /// The outputs over `eval` (reset first; at most `num_batch` batches, `None`: all): one
    /// array per output, the batches concatenated along axis 0 with the padding removed
    /// (`[]` when no batch ran).
    pub fn predict(
        &mut self,
        eval: &mut dyn crate::io::DataIter,
        num_batch: Option<usize>,
    ) -> Result<Vec<NDArray>> {
        let per_batch = self.predict_every_batch(eval, num_batch)?;
        let Some(first) = per_batch.first() else {
            return Ok(vec![]);
        };
        (0..first.len())
            .map(|i| {
                let parts: Vec<NDArray> =
                    per_batch.iter().filter_map(|b| b.get(i).cloned()).collect();
                merge(&parts)
            })
            .collect()
    }
}

/// [`Module::fit`]'s steps of the one fit loop, over core iterators, metrics and callbacks.
struct CoreFit<'m, 't, 'e> {
    module: &'m mut Module,
    train: &'t mut dyn crate::io::DataIter,
    eval: Option<&'e mut dyn crate::io::DataIter>,
    eval_metric: EvalMetric,
    validation_metric: EvalMetric,
    batch_end_callback: Option<BatchEndCallback>,
    epoch_end_callback: Option<EpochEndCallback>,
    eval_batch_end_callback: Option<BatchEndCallback>,
    eval_end_callback: Option<BatchEndCallback>,
    records: Vec<EpochRecord>,
}

impl FitSteps for CoreFit<'_, '_, '_> {
    type Batch = DataBatch;
    type Error = Error;

    fn begin_epoch(&mut self, _epoch: usize) -> Result<()> {
        self.train.reset()?;
        self.eval_metric.reset();
        Ok(())
    }

    fn next_batch(&mut self) -> Result<Option<DataBatch>> {
        self.train.next_batch()
    }

    fn train_batch(&mut self, _epoch: usize, batch: &DataBatch) -> Result<()> {
        self.module.check_interrupt("fit")?;
        self.module.forward_backward(batch)?;
        self.module.update()?;
        self.module
            .update_metric(&mut self.eval_metric, &batch.label)
    }

    fn batch_end(&mut self, epoch: usize, nbatch: usize, _last: bool) -> Result<()> {
        if let Some(cb) = self.batch_end_callback.as_mut() {
            cb(&BatchEndParam {
                epoch,
                nbatch,
                eval_metric: &self.eval_metric,
            });
        }
        Ok(())
    }

    fn end_epoch(&mut self, epoch: usize, seconds: f64) -> Result<()> {
        let train = self.module.pooled_metric(&self.eval_metric, true)?;
        if self.module.execs.len() > 1 {
            // MXNet syncs the averaged params (aux states included) back to every device.
            let (a, x) = self.module.get_params()?;
            self.module.set_params(InitOptions {
                arg_params: Some(a),
                aux_params: Some(x),
                force_init: true,
                ..Default::default()
            })?;
        }
        if let Some(cb) = self.epoch_end_callback.as_mut() {
            cb(epoch, self.module)?;
        }
        self.records.push(EpochRecord {
            epoch,
            train,
            validation: vec![],
            seconds,
        });
        Ok(())
    }

    fn validate(&mut self, epoch: usize) -> Result<()> {
        let Some(it) = self.eval.as_deref_mut() else {
            return Ok(());
        };
        let nbatch = self.module.score_batches(
            it,
            &mut self.validation_metric,
            None,
            epoch,
            self.eval_batch_end_callback.as_mut(),
        )?;
        if let Some(cb) = self.eval_end_callback.as_mut() {
            cb(&BatchEndParam {
                epoch,
                nbatch,
                eval_metric: &self.validation_metric,
            });
        }
        let validation = self.module.pooled_metric(&self.validation_metric, false)?;
        if let Some(r) = self.records.last_mut() {
            r.validation = validation;
        }
        Ok(())
    }
}

/// [`Module::score`]'s steps of the one score loop.
struct CoreScore<'m, 'e, 'c> {
    module: &'m mut Module,
    eval: &'e mut dyn crate::io::DataIter,
    metric: &'m mut EvalMetric,
    epoch: usize,
    batch_end: Option<&'c mut BatchEndCallback>,
}

impl ScoreSteps for CoreScore<'_, '_, '_> {
    type Batch = DataBatch;
    type Error = Error;

    fn next_batch(&mut self) -> Result<Option<DataBatch>> {
        self.eval.next_batch()
    }

    fn eval_batch(&mut self, batch: &DataBatch) -> Result<()> {
        self.module.check_interrupt("score")?;
        self.module.forward(batch, Some(false))?;
        if batch.pad > 0 {
            let outs = unpad(self.module.outputs_merged()?, batch.pad)?;
            let labels = unpad(batch.label.clone(), batch.pad)?;
            self.metric.update(&labels, &outs)
        } else {
            self.module.update_metric(self.metric, &batch.label)
        }
    }

    fn batch_end(&mut self, nbatch: usize) -> Result<()> {
        if let Some(cb) = self.batch_end.as_mut() {
            cb(&BatchEndParam {
                epoch: self.epoch,
                nbatch,
                eval_metric: self.metric,
            });
        }
        Ok(())
    }
}
