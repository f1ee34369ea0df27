//! The one fit loop and the one score loop, in MXNet's order, for every caller.
//!
//! A training run and an evaluation pass are a fixed sequence of steps; what a step does
//! depends on who runs it. [`Module::fit`](super::Module::fit) and
//! [`Module::score`](super::Module::score) implement the steps over core iterators, metrics
//! and callbacks; the Python binding implements them over Python iterators, metrics, monitors
//! and callbacks (and over BucketingModules). Both run [`fit_loop`] / [`score_loop`], so the
//! order of things — MXNet 1.9.1's `BaseModule.fit` and `score` — is written down once:
//!
//! ```text
//! for epoch in begin_epoch..num_epoch:
//!     begin_epoch                       reset the training data and metric
//!     batch = next_batch
//!     while batch:
//!         train_batch(batch)            (monitor tic), forward_backward, update, update_metric
//!         batch = next_batch            fetched before the batch-end callbacks, as MXNet does
//!         batch_end(nbatch, last)       (monitor toc), the metric when last, the callbacks
//!     end_epoch(seconds)                log/record the metric and time, sync the parameters,
//!                                       the epoch-end callbacks
//!     validate                          the validation pass (a score loop), its callbacks
//!
//! score:  n = 0; while n < num_batch and (batch = next_batch): eval_batch(batch);
//!         batch_end(n); n += 1        → the number of batches run
//! ```
//!
//! Each step returns the implementation's own error type, so a Python exception raised by a
//! callback (KeyboardInterrupt included) passes through unchanged.

use std::ops::Range;
use std::time::Instant;

/// The steps of a training run that [`fit_loop`] drives.
pub trait FitSteps {
    /// One batch of training data.
    type Batch;
    /// The error every step may return.
    type Error;
    /// Starts epoch `epoch`: resets the training data and the training metric.
    fn begin_epoch(&mut self, epoch: usize) -> Result<(), Self::Error>;
    /// The next training batch; `None` ends the epoch.
    fn next_batch(&mut self) -> Result<Option<Self::Batch>, Self::Error>;
    /// One training step: forward_backward, update and the training metric (monitor tic
    /// first, where there is one).
    fn train_batch(&mut self, epoch: usize, batch: &Self::Batch) -> Result<(), Self::Error>;
    /// After batch `nbatch` (0-based) once the next one has been fetched; `last` when there is
    /// none: monitor toc, the epoch's metric values on the last batch, the batch-end callbacks.
    fn batch_end(&mut self, epoch: usize, nbatch: usize, last: bool) -> Result<(), Self::Error>;
    /// After the epoch's batches (`seconds` of training): the metric logged and recorded, the
    /// parameters synced across devices, the epoch-end callbacks.
    fn end_epoch(&mut self, epoch: usize, seconds: f64) -> Result<(), Self::Error>;
    /// The validation pass of `epoch` (nothing without evaluation data).
    fn validate(&mut self, epoch: usize) -> Result<(), Self::Error>;
}

/// Runs the epochs `epochs` of a training run (MXNet's `fit` loop, see the module docs).
pub fn fit_loop<S: FitSteps + ?Sized>(steps: &mut S, epochs: Range<usize>) -> Result<(), S::Error> {
    for epoch in epochs {
        let tic = Instant::now();
        steps.begin_epoch(epoch)?;
        let mut next = steps.next_batch()?;
        let mut nbatch = 0;
        while let Some(batch) = next {
            steps.train_batch(epoch, &batch)?;
            next = steps.next_batch()?;
            steps.batch_end(epoch, nbatch, next.is_none())?;
            nbatch += 1;
        }
        steps.end_epoch(epoch, tic.elapsed().as_secs_f64())?;
        steps.validate(epoch)?;
    }
    Ok(())
}

/// The steps of an evaluation pass that [`score_loop`] drives.
pub trait ScoreSteps {
    /// One batch of evaluation data.
    type Batch;
    /// The error every step may return.
    type Error;
    /// The next batch; `None` ends the pass.
    fn next_batch(&mut self) -> Result<Option<Self::Batch>, Self::Error>;
    /// Forward (not training) and the metric over the batch's unpadded samples.
    fn eval_batch(&mut self, batch: &Self::Batch) -> Result<(), Self::Error>;
    /// After batch `nbatch` (0-based): the batch-end callbacks.
    fn batch_end(&mut self, nbatch: usize) -> Result<(), Self::Error>;
}

/// Runs an evaluation pass of at most `num_batch` batches (`None`: all); returns the number
/// of batches run.
pub fn score_loop<S: ScoreSteps + ?Sized>(
    steps: &mut S,
    num_batch: Option<usize>,
) -> Result<usize, S::Error> {
    let mut n = 0;
    while num_batch.is_none_or(|k| n < k) {
        let Some(batch) = steps.next_batch()? else {
            break;
        };
        steps.eval_batch(&batch)?;
        steps.batch_end(n)?;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records every step; batches are numbers, `per_epoch` of them per epoch.
    struct Recorder {
        per_epoch: usize,
        left: usize,
        log: Vec<String>,
    }

    impl FitSteps for Recorder {
        type Batch = usize;
        type Error = String;
        fn begin_epoch(&mut self, epoch: usize) -> Result<(), String> {
            self.left = self.per_epoch;
            self.log.push(format!("begin {epoch}"));
            Ok(())
        }
        fn next_batch(&mut self) -> Result<Option<usize>, String> {
            let b = (self.left > 0).then(|| self.per_epoch - self.left);
            self.left = self.left.saturating_sub(1);
            self.log.push(format!("next {b:?}"));
            Ok(b)
        }
        fn train_batch(&mut self, _: usize, b: &usize) -> Result<(), String> {
            self.log.push(format!("train {b}"));
            Ok(())
        }
        fn batch_end(&mut self, _: usize, n: usize, last: bool) -> Result<(), String> {
            self.log.push(format!("end {n} {last}"));
            Ok(())
        }
        fn end_epoch(&mut self, epoch: usize, _: f64) -> Result<(), String> {
            self.log.push(format!("end_epoch {epoch}"));
            Ok(())
        }
        fn validate(&mut self, epoch: usize) -> Result<(), String> {
            self.log.push(format!("validate {epoch}"));
            Ok(())
        }
    }

    impl ScoreSteps for Recorder {
        type Batch = usize;
        type Error = String;
        fn next_batch(&mut self) -> Result<Option<usize>, String> {
            FitSteps::next_batch(self)
        }
        fn eval_batch(&mut self, b: &usize) -> Result<(), String> {
            self.log.push(format!("eval {b}"));
            Ok(())
        }
        fn batch_end(&mut self, n: usize) -> Result<(), String> {
            self.log.push(format!("end {n}"));
            Ok(())
        }
    }

    #[test]
    fn fit_runs_mxnets_order_with_the_next_batch_fetched_before_batch_end() {
        let mut r = Recorder {
            per_epoch: 2,
            left: 0,
            log: vec![],
        };
        fit_loop(&mut r, 3..4).unwrap_or_else(|e| panic!("{e}"));
        let want = [
            "begin 3",
            "next Some(0)",
            "train 0",
            "next Some(1)",
            "end 0 false",
            "train 1",
            "next None",
            "end 1 true",
            "end_epoch 3",
            "validate 3",
        ];
        assert_eq!(r.log, want);
    }

    #[test]
    fn score_stops_at_num_batch_or_the_end() {
        let mut r = Recorder {
            per_epoch: 3,
            left: 3,
            log: vec![],
        };
        assert_eq!(score_loop(&mut r, Some(2)), Ok(2));
        assert_eq!(
            r.log,
            [
                "next Some(0)",
                "eval 0",
                "end 0",
                "next Some(1)",
                "eval 1",
                "end 1"
            ]
        );
        r.left = 1;
        assert_eq!(score_loop(&mut r, None), Ok(1));
    }

    #[test]
    fn an_error_stops_the_loop_and_passes_through() {
        struct Failing;
        impl ScoreSteps for Failing {
            type Batch = ();
            type Error = &'static str;
            fn next_batch(&mut self) -> Result<Option<()>, &'static str> {
                Ok(Some(()))
            }
            fn eval_batch(&mut self, _: &()) -> Result<(), &'static str> {
                Err("stop")
            }
            fn batch_end(&mut self, _: usize) -> Result<(), &'static str> {
                Ok(())
            }
        }
        assert_eq!(score_loop(&mut Failing, None), Err("stop"));
    }
}
