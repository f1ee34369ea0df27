//! Synchronous data parallelism (SPEC §9.2): the [`Collective`] trait through which a
//! [`Module`] broadcasts its parameters from rank 0 and sums its gradients over workers, the
//! check that every worker holds the same parameters, the bucketed in-place allreduce of
//! the update, and [`ThreadGroup`], workers as threads of one process (for tests and for Rust
//! users training several modules side by side). The Python package implements the trait
//! with MPI (mpi4py).
//!
//! ```
//! use mxfn_core::module::{Collective, ThreadGroup};
//! let workers = ThreadGroup::new(2).unwrap();
//! let sums: Vec<Vec<f32>> = std::thread::scope(|s| {
//!     let hs: Vec<_> = workers
//!         .iter()
//!         .map(|w| s.spawn(move || {
//!             let mut buf = vec![w.rank() as f32 + 1.0; 3];
//!             w.allreduce_sum(&mut buf).map(|_| buf)
//!         }))
//!         .collect();
//!     hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
//! });
//! assert_eq!(sums, vec![vec![3.0; 3], vec![3.0; 3]]);
//! ```

use super::*;
use std::sync::Condvar;
use std::time::{Duration, Instant};

/// The operations data-parallel training needs from a group of workers (MPI's, or
/// [`ThreadGroup`]'s). Every worker makes the same calls in the same order; a call returns
/// once every worker has made it.
pub trait Collective: Send + Sync {
    /// This worker's rank, `0..size()`.
    fn rank(&self) -> usize;
    /// The number of workers.
    fn size(&self) -> usize;
    /// Sums `buf` element-wise over the workers, in place. The sum runs in a fixed order
    /// (rank 0 first), so every worker gets the same bits whatever the timing.
    fn allreduce_sum(&self, buf: &mut [f32]) -> Result<()>;
    /// Overwrites `buf` with worker `root`'s `buf`.
    fn broadcast(&self, buf: &mut [f32], root: usize) -> Result<()>;
    /// Every worker's `mine`, in rank order.
    fn allgather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// Returns once every worker has called it.
    fn barrier(&self) -> Result<()>;
}

/// Gradients (and broadcast parameters) travel in buckets of about this many bytes: several
/// small tensors share one message, a large one goes alone and in place.
pub const DEFAULT_BUCKET_BYTES: usize = 4 << 20;

/// What a module's collective calls cost so far (see [`Module::comm_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CommStats {
    /// Updates that summed gradients over the workers.
    pub steps: usize,
    /// Seconds spent in those sums (waiting for the slowest worker included).
    pub seconds: f64,
    /// Collective calls made by those sums (one per bucket).
    pub calls: usize,
}

/// Checks that every worker has the same `(name, description)` items (parameter names,
/// shapes and dtypes); the error names the first parameter that differs, on every worker.
pub fn check_same_on_all(c: &dyn Collective, call: &str, items: &[(String, String)]) -> Result<()> {
    let encode = |items: &[(String, String)]| -> Vec<u8> {
        let mut s = String::new();
        for (n, d) in items {
            s.push_str(n);
            s.push('\t');
            s.push_str(d);
            s.push('\n');
        }
        s.into_bytes()
    };
    let all = c.allgather_bytes(&encode(items))?;
    let decode = |b: &[u8]| -> Vec<(String, String)> {
        String::from_utf8_lossy(b)
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .map(|(n, d)| (n.to_string(), d.to_string()))
            .collect()
    };
    let root = all.first().map(|b| decode(b)).unwrap_or_default();
    for (r, theirs) in all.iter().enumerate().skip(1) {
        let theirs = decode(theirs);
        if theirs == root {
            continue;
        }
        let find = |v: &[(String, String)], n: &str| {
            v.iter().find(|(m, _)| m == n).map(|(_, d)| d.clone())
        };
        for (n, d) in &root {
            match find(&theirs, n) {
                Some(t) if &t == d => {}
                Some(t) => {
                    return Err(Error::invalid(
                        format!("{call}: parameter \"{n}\" across workers"),
                        format!("{d} (as on rank 0)"),
                        format!("{t} on rank {r}"),
                    ))
                }
                None => {
                    return Err(Error::invalid(
                        format!("{call}: parameter \"{n}\" across workers"),
                        format!("{d} on every rank (as on rank 0)"),
                        format!("no parameter \"{n}\" on rank {r}"),
                    ))
                }
            }
        }
        if let Some((n, t)) = theirs.iter().find(|(n, _)| find(&root, n).is_none()) {
            return Err(Error::invalid(
                format!("{call}: parameter \"{n}\" across workers"),
                "the parameters of rank 0",
                format!("\"{n}\" ({t}) on rank {r}, which rank 0 does not have"),
            ));
        }
        return Err(Error::invalid(
            format!("{call}: parameters across workers"),
            "the order of rank 0",
            format!("another order on rank {r}"),
        ));
    }
    Ok(())
}

/// Which collective runs over the buckets.
#[derive(Clone, Copy)]
pub(super) enum BucketOp {
    Sum,
    FromRoot,
}

/// Runs `op` over `arrays` (float32) in buckets of about `bucket_bytes`: a bucket of one
/// array runs in place on its buffer, a bucket of several is packed into `fusion` (reused)
/// and unpacked. `what(i)` names array `i` in errors. Returns the number of calls made.
pub(super) fn run_buckets(
    c: &dyn Collective,
    op: BucketOp,
    arrays: &mut [&mut NDArray],
    bucket_bytes: usize,
    fusion: &mut Vec<f32>,
    what: &dyn Fn(usize) -> String,
) -> Result<usize> {
    let run = |buf: &mut [f32]| match op {
        BucketOp::Sum => c.allreduce_sum(buf),
        BucketOp::FromRoot => c.broadcast(buf, 0),
    };
    // Fail before any message when an array is not float32, so every worker fails alike.
    for (i, a) in arrays.iter().enumerate() {
        if a.dtype() != crate::DType::Float32 {
            return Err(Error::invalid(
                what(i),
                "a float32 array (distributed training sums float32)",
                a.dtype().name(),
            ));
        }
    }
    let cap = (bucket_bytes / 4).max(1);
    let mut calls = 0;
    let mut start = 0;
    while start < arrays.len() {
        let mut end = start + 1;
        let mut len = arrays[start].size();
        while end < arrays.len() && len + arrays[end].size() <= cap {
            len += arrays[end].size();
            end += 1;
        }
        if end - start == 1 {
            run(arrays[start].f32s_mut(&what(start))?)?;
        } else {
            fusion.clear();
            for (k, a) in arrays[start..end].iter().enumerate() {
                fusion.extend_from_slice(a.f32s(&what(start + k))?);
            }
            run(fusion)?;
            let mut off = 0;
            for (k, a) in arrays[start..end].iter_mut().enumerate() {
                let dst = a.f32s_mut(&what(start + k))?;
                let n = dst.len();
                dst.copy_from_slice(fusion.get(off..off + n).ok_or_else(|| {
                    Error::Msg("internal: fusion buffer shorter than its bucket".into())
                })?);
                off += n;
            }
        }
        calls += 1;
        start = end;
    }
    Ok(calls)
}

impl Module {
    /// Makes this module one worker of `collective` (`None`: a single worker again). Later
    /// `init_params` / `init_optimizer` calls check that every worker has the same parameter
    /// names, shapes and dtypes and broadcast rank 0's values; `init_optimizer` sets
    /// `rescale_grad = 1 / (batch × workers)`; `update` sums the gradients over the workers
    /// (in place, in buckets) before applying the optimizer, so every worker keeps the same
    /// parameters. Call it on every worker, before `init_optimizer`.
    pub fn set_collective(&mut self, collective: Option<Arc<dyn Collective>>) {
        self.collective = collective;
    }

    /// The collective set by [`set_collective`](Self::set_collective).
    pub fn collective(&self) -> Option<&Arc<dyn Collective>> {
        self.collective.as_ref()
    }

    /// The number of workers: the collective's size, 1 without one.
    pub fn num_workers(&self) -> usize {
        self.collective.as_ref().map_or(1, |c| c.size().max(1))
    }

    /// Sets the bucket size of the gradient sums (default [`DEFAULT_BUCKET_BYTES`]; 0 sends
    /// every gradient alone).
    pub fn set_bucket_bytes(&mut self, bytes: usize) {
        self.bucket_bytes = bytes;
    }

    /// The cost of the gradient sums so far.
    pub fn comm_stats(&self) -> CommStats {
        self.comm
    }

    pub(super) fn distributed(&self) -> Option<Arc<dyn Collective>> {
        self.collective.clone().filter(|c| c.size() > 1)
    }

    /// `metric`'s values pooled over the workers (every worker's state merged in rank order,
    /// as if one metric had seen every worker's batches): local values, or global ones when
    /// `global`. A single worker reads the metric. Every worker must call it at the same point.
    pub fn pooled_metric(&self, metric: &EvalMetric, global: bool) -> Result<Vec<(String, f64)>> {
        let read = |m: &EvalMetric| if global { m.get_global() } else { m.get() };
        let Some(c) = self.distributed() else {
            return Ok(read(metric));
        };
        let mine: Vec<u8> = metric
            .state()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut pooled = metric.clone();
        pooled.reset();
        for b in c.allgather_bytes(&mine)? {
            let state: Vec<f64> = b
                .chunks_exact(8)
                .map(|w| {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(w);
                    f64::from_le_bytes(a)
                })
                .collect();
            pooled.merge_state(&state)?;
        }
        Ok(read(&pooled))
    }

    /// With several workers: checks that every worker has the same parameters and auxiliary
    /// states (names, shapes, dtypes) and gives every worker rank 0's values.
    pub(super) fn broadcast_params(&mut self, call: &str) -> Result<()> {
        let Some(c) = self.distributed() else {
            return Ok(());
        };
        let exe = self
            .execs
            .first()
            .ok_or_else(|| lifecycle(call.trim_start_matches("module."), "bind"))?;
        let describe = |a: &NDArray| {
            format!(
                "shape {} {}",
                crate::error::tuple_text(&format!("{:?}", a.shape())),
                a.dtype().name()
            )
        };
        let mut items = Vec::new();
        for n in &self.param_names {
            items.push((n.clone(), describe(exe.arg(n)?)));
        }
        for (n, a) in exe.aux_names().iter().zip(&exe.aux_arrays) {
            items.push((n.clone(), format!("auxiliary state, {}", describe(a))));
        }
        check_same_on_all(c.as_ref(), call, &items)?;
        let names: Vec<String> = items.into_iter().map(|(n, _)| n).collect();
        let np = self.param_names.len();
        let mut values: Vec<NDArray> = self
            .param_names
            .iter()
            .map(|n| exe.arg(n).cloned())
            .collect::<Result<_>>()?;
        values.extend(exe.aux_arrays.iter().cloned());
        {
            let mut refs: Vec<&mut NDArray> = values.iter_mut().collect();
            let what = |i: usize| {
                format!(
                    "{call}: parameter \"{}\" under a distributed kvstore",
                    names.get(i).map_or("?", |s| s.as_str())
                )
            };
            run_buckets(
                c.as_ref(),
                BucketOp::FromRoot,
                &mut refs,
                self.bucket_bytes,
                &mut self.fusion,
                &what,
            )?;
        }
        for exe in &mut self.execs {
            for (k, v) in values.iter().enumerate() {
                match names.get(k) {
                    Some(n) if k < np => exe.set_arg(n, v.clone())?,
                    Some(n) => exe.set_aux(n, v.clone())?,
                    None => {}
                }
            }
        }
        Ok(())
    }

    /// `update` with several workers: every non-fixed gradient summed over the devices, then
    /// over the workers (in place, in buckets, last layers first: the order backward finishes
    /// them), then the optimizer. A single device's gradient arrays end up holding the sum over
    /// the workers, as MXNet's kvstore pull leaves them.
    pub(super) fn update_distributed(
        &mut self,
        c: &dyn Collective,
        opt: &Arc<Mutex<Optimizer>>,
    ) -> Result<()> {
        let single = self.execs.len() == 1;
        let mut grads: Vec<(usize, NDArray)> = Vec::new();
        for (i, name) in self.param_names.iter().enumerate() {
            if self.fixed.contains(name) {
                continue;
            }
            if single {
                let Some(exe) = self.execs.first_mut() else {
                    break;
                };
                let k = exe.arg_names().iter().position(|n| n == name);
                // Taken out (and put back below) so the sum runs on the gradient's own buffer.
                if let Some(g) = k
                    .and_then(|k| exe.grad_arrays.get_mut(k))
                    .and_then(Option::take)
                {
                    grads.push((i, g));
                }
                continue;
            }
            let mut grad: Option<NDArray> = None;
            for exe in &self.execs {
                if let Some(g) = exe.grad(name)? {
                    grad = Some(match grad {
                        None => g.deep_copy(),
                        Some(acc) => acc.add(g)?,
                    });
                }
            }
            if let Some(g) = grad {
                grads.push((i, g));
            }
        }
        let out = self.sum_and_apply(c, opt, &mut grads);
        if single {
            if let Some(exe) = self.execs.first_mut() {
                for (i, g) in grads {
                    let k = self
                        .param_names
                        .get(i)
                        .and_then(|n| exe.arg_names().iter().position(|m| m == n));
                    if let Some(slot) = k.and_then(|k| exe.grad_arrays.get_mut(k)) {
                        *slot = Some(g);
                    }
                }
            }
        }
        out
    }

    fn sum_and_apply(
        &mut self,
        c: &dyn Collective,
        opt: &Arc<Mutex<Optimizer>>,
        grads: &mut [(usize, NDArray)],
    ) -> Result<()> {
        let tic = Instant::now();
        let names: Vec<String> = grads
            .iter()
            .rev()
            .map(|(i, _)| self.param_names.get(*i).cloned().unwrap_or_default())
            .collect();
        let mut refs: Vec<&mut NDArray> = grads.iter_mut().rev().map(|(_, g)| g).collect();
        let what = |k: usize| {
            format!(
                "module.update: gradient of \"{}\" under a distributed kvstore",
                names.get(k).map_or("?", |s| s.as_str())
            )
        };
        let calls = run_buckets(
            c,
            BucketOp::Sum,
            &mut refs,
            self.bucket_bytes,
            &mut self.fusion,
            &what,
        )?;
        self.comm.steps += 1;
        self.comm.calls += calls;
        self.comm.seconds += tic.elapsed().as_secs_f64();
        // The collective ran before the optimizer and state locks are taken.
        let mut o = lock_opt(opt);
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        for (i, grad) in grads.iter() {
            let Some(name) = self.param_names.get(*i) else {
                continue;
            };
            let index = self.opt_index.get(*i).copied().unwrap_or(*i);
            apply_one(&mut self.execs, &mut o, &mut states, index, name, grad)?;
        }
        Ok(())
    }
}

/// The optimizer step of parameter `i` (`name`) with `grad`: in place on the first device,
/// then shared with the others.
pub(super) fn apply_one(
    execs: &mut [Executor],
    o: &mut Optimizer,
    states: &mut OptStates,
    i: usize,
    name: &str,
    grad: &NDArray,
) -> Result<()> {
    let Some((first, rest)) = execs.split_first_mut() else {
        return Ok(());
    };
    let weight = first.arg_mut(name)?;
    let state = match states.get_mut(&i) {
        Some(s) => s,
        None => {
            let s = o.create_state(i, weight)?;
            states.entry(i).or_insert(s)
        }
    };
    o.update(i, weight, grad, state)?;
    let weight = weight.clone();
    for exe in rest {
        exe.set_arg(name, weight.clone())?;
    }
    Ok(())
}

/// Workers as threads of one process: [`ThreadGroup::new`] gives one [`Collective`] per
/// worker; each is moved to its thread. A call waits for the others at most the group's
/// timeout (a worker that stopped calling makes the others fail instead of hang).
pub struct ThreadGroup {
    shared: Arc<Shared>,
    rank: usize,
}

struct Shared {
    size: usize,
    timeout: Duration,
    round: Mutex<Round>,
    cv: Condvar,
}

#[derive(Default)]
struct Round {
    /// Rounds completed (every worker has read the result).
    generation: u64,
    deposits: Vec<Option<Vec<u8>>>,
    arrived: usize,
    result: Option<Arc<Vec<Vec<u8>>>>,
    readers_left: usize,
}

impl ThreadGroup {
    /// A group of `size` workers that wait for each other at most 60 seconds per call.
    pub fn new(size: usize) -> Result<Vec<ThreadGroup>> {
        Self::with_timeout(size, Duration::from_secs(60))
    }

    /// A group of `size` workers that wait for each other at most `timeout` per call.
    pub fn with_timeout(size: usize, timeout: Duration) -> Result<Vec<ThreadGroup>> {
        if size == 0 {
            return Err(Error::invalid(
                "ThreadGroup: size",
                "at least 1 worker",
                "0",
            ));
        }
        let shared = Arc::new(Shared {
            size,
            timeout,
            round: Mutex::new(Round {
                deposits: vec![None; size],
                ..Default::default()
            }),
            cv: Condvar::new(),
        });
        Ok((0..size)
            .map(|rank| ThreadGroup {
                shared: shared.clone(),
                rank,
            })
            .collect())
    }

    /// Every worker's `mine`, in rank order: deposit, wait for the round to fill, read, and
    /// let the next round start once every worker has read.
    fn exchange(&self, what: &str, mine: Vec<u8>) -> Result<Arc<Vec<Vec<u8>>>> {
        let s = &*self.shared;
        let deadline = Instant::now() + s.timeout;
        let timed_out = || {
            Error::Msg(format!(
            "collective {what}: worker {} of {} waited more than {:.0?} for the other workers (one stopped or diverged)",
            self.rank, s.size, s.timeout
        ))
        };
        let mut r = s.round.lock().unwrap_or_else(|p| p.into_inner());
        // The previous round is still being read: wait for it to drain.
        while r.result.is_some() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(timed_out());
            }
            r =
                s.cv.wait_timeout(r, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
        }
        let my_gen = r.generation;
        if let Some(slot) = r.deposits.get_mut(self.rank) {
            *slot = Some(mine);
        }
        r.arrived += 1;
        if r.arrived == s.size {
            let all: Vec<Vec<u8>> = r
                .deposits
                .iter_mut()
                .map(|d| d.take().unwrap_or_default())
                .collect();
            r.result = Some(Arc::new(all));
            r.readers_left = s.size;
            r.arrived = 0;
            s.cv.notify_all();
        }
        while !(r.generation == my_gen && r.result.is_some()) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(timed_out());
            }
            r =
                s.cv.wait_timeout(r, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
        }
        let out = r.result.clone().unwrap_or_default();
        r.readers_left -= 1;
        if r.readers_left == 0 {
            r.result = None;
            r.generation += 1;
            s.cv.notify_all();
        }
        Ok(out)
    }
}

fn f32_bytes(x: &[f32]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn read_f32(b: &[u8], i: usize) -> f32 {
    let mut w = [0u8; 4];
    if let Some(s) = b.get(4 * i..4 * i + 4) {
        w.copy_from_slice(s);
    }
    f32::from_le_bytes(w)
}

impl Collective for ThreadGroup {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.shared.size
    }
    fn allreduce_sum(&self, buf: &mut [f32]) -> Result<()> {
        let all = self.exchange("allreduce", f32_bytes(buf))?;
        if let Some(b) = all.iter().find(|b| b.len() != 4 * buf.len()) {
            return Err(Error::invalid(
                "collective allreduce: buffer length",
                format!("{} values on every worker", buf.len()),
                format!("{} values on another worker", b.len() / 4),
            ));
        }
        for (i, v) in buf.iter_mut().enumerate() {
            // Rank order: the same bits on every worker.
            let mut acc = 0.0f32;
            for (r, b) in all.iter().enumerate() {
                acc = if r == 0 {
                    read_f32(b, i)
                } else {
                    acc + read_f32(b, i)
                };
            }
            *v = acc;
        }
        Ok(())
    }
    fn broadcast(&self, buf: &mut [f32], root: usize) -> Result<()> {
        let mine = if self.rank == root {
            f32_bytes(buf)
        } else {
            vec![]
        };
        let all = self.exchange("broadcast", mine)?;
        let src = all.get(root).ok_or_else(|| {
            Error::invalid(
                "collective broadcast: root",
                format!("a rank below {}", self.shared.size),
                root.to_string(),
            )
        })?;
        if src.len() != 4 * buf.len() {
            return Err(Error::invalid(
                "collective broadcast: buffer length",
                format!("{} values (as here)", buf.len()),
                format!("{} values on rank {root}", src.len() / 4),
            ));
        }
        for (i, v) in buf.iter_mut().enumerate() {
            *v = read_f32(src, i);
        }
        Ok(())
    }
    fn allgather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        Ok(self.exchange("allgather", mine.to_vec())?.as_ref().clone())
    }
    fn barrier(&self) -> Result<()> {
        self.exchange("barrier", vec![]).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on_workers<T: Send>(n: usize, f: impl Fn(ThreadGroup) -> T + Sync) -> Vec<T> {
        on_workers_waiting(n, Duration::from_secs(10), f)
    }

    fn on_workers_waiting<T: Send>(
        n: usize,
        timeout: Duration,
        f: impl Fn(ThreadGroup) -> T + Sync,
    ) -> Vec<T> {
        let group = ThreadGroup::with_timeout(n, timeout).unwrap();
        std::thread::scope(|s| {
            let hs: Vec<_> = group.into_iter().map(|w| s.spawn(|| f(w))).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn thread_group_sums_broadcasts_and_gathers_in_rank_order() {
        let out = on_workers(3, |w| {
            let r = w.rank() as f32;
            let mut a = vec![r, 10.0 * r];
            w.allreduce_sum(&mut a).unwrap();
            let mut b = vec![r + 5.0];
            w.broadcast(&mut b, 2).unwrap();
            w.barrier().unwrap();
            let g = w.allgather_bytes(&[w.rank() as u8]).unwrap();
            (a, b, g)
        });
        for (a, b, g) in out {
            assert_eq!(a, vec![3.0, 30.0]);
            assert_eq!(b, vec![7.0]);
            assert_eq!(g, vec![vec![0], vec![1], vec![2]]);
        }
    }

    #[test]
    fn a_worker_that_stops_makes_the_others_fail_in_time() {
        let out = on_workers_waiting(2, Duration::from_millis(300), |w| {
            if w.rank() == 1 {
                return Ok(());
            }
            let t = Instant::now();
            let r = w.barrier();
            assert!(t.elapsed() < Duration::from_secs(30));
            r
        });
        let e = out[0].as_ref().unwrap_err().to_string();
        assert!(e.contains("waited more than"), "{e}");
    }

    #[test]
    fn mismatched_parameters_name_the_parameter_on_every_worker() {
        let out = on_workers(2, |w| {
            let shape = if w.rank() == 0 {
                "shape (3,)"
            } else {
                "shape (4,)"
            };
            let items = vec![
                ("a".to_string(), "shape (1,)".to_string()),
                ("fc_weight".to_string(), shape.to_string()),
            ];
            check_same_on_all(&w, "module.init_optimizer", &items)
                .unwrap_err()
                .to_string()
        });
        for e in out {
            assert!(e.contains("\"fc_weight\"") && e.contains("rank 1"), "{e}");
            assert!(e.contains("(3,)") && e.contains("(4,)"), "{e}");
        }
        let out = on_workers(2, |w| {
            let mut items = vec![("a".to_string(), "x".to_string())];
            if w.rank() == 1 {
                items.push(("extra".to_string(), "x".to_string()));
            }
            check_same_on_all(&w, "m", &items).unwrap_err().to_string()
        });
        assert!(out[0].contains("\"extra\""), "{}", out[0]);
    }

    #[test]
    fn buckets_pack_small_arrays_and_leave_every_value_summed() {
        let out = on_workers(2, |w| {
            let r = w.rank() as f32 + 1.0;
            let mut xs: Vec<NDArray> = [3usize, 2, 5]
                .iter()
                .map(|&n| NDArray::from_f32(&[n], vec![r; n]).unwrap())
                .collect();
            let mut refs: Vec<&mut NDArray> = xs.iter_mut().collect();
            let mut fusion = vec![];
            // 20 bytes: [3, 2] share a bucket, [5] goes alone.
            let calls = run_buckets(&w, BucketOp::Sum, &mut refs, 20, &mut fusion, &|i| {
                i.to_string()
            })
            .unwrap();
            (
                calls,
                xs.iter()
                    .map(|x| x.f32s("x").unwrap().to_vec())
                    .collect::<Vec<_>>(),
            )
        });
        for (calls, xs) in out {
            assert_eq!(calls, 2);
            assert!(xs.iter().flatten().all(|&v| v == 3.0));
        }
    }
}
