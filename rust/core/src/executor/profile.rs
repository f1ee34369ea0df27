//! The operator profiler: while it runs, every executor times each node's forward and backward
//! and adds the time to a process-wide table per operator type and per layer (node name);
//! [`dumps`] renders it (what `mx.profiler.dumps()` and `MXFN_PROFILE=1` print).
//!
//! Off, it costs one relaxed atomic load per forward or backward pass; on, two clock reads
//! and one short uncontended lock per node.
//!
//! ```
//! use mxfn_core::executor::profile;
//! profile::set_running(true);
//! // … run executors …
//! profile::set_running(false);
//! let table = profile::dumps(true); // the table, then the counters are cleared
//! assert!(table.starts_with("Profile"));
//! ```

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

static RUNNING: AtomicBool = AtomicBool::new(false);
static TABLE: Mutex<Option<Profile>> = Mutex::new(None);

/// Which pass a time belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pass {
    /// The node's forward.
    Forward,
    /// The node's backward.
    Backward,
}

impl Pass {
    fn name(self) -> &'static str {
        match self {
            Pass::Forward => "forward",
            Pass::Backward => "backward",
        }
    }
}

/// Calls and accumulated time of one row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    /// Number of calls.
    pub count: u64,
    /// Total time.
    pub total: Duration,
}

impl Stat {
    fn add(&mut self, d: Duration) {
        self.count += 1;
        self.total += d;
    }
}

/// The accumulated table: per (operator, pass) and per (node, pass).
#[derive(Clone, Debug, Default)]
pub struct Profile {
    /// Per operator type (MXNet's name) and pass.
    pub ops: HashMap<(&'static str, Pass), Stat>,
    /// Per node name and pass: the node's operator and its stat.
    pub nodes: HashMap<String, [(Option<&'static str>, Stat); 2]>,
}

/// Starts (`true`) or stops (`false`) recording. Stopping keeps what was recorded.
pub fn set_running(on: bool) {
    RUNNING.store(on, Ordering::Relaxed);
}

/// Whether the profiler records.
pub fn running() -> bool {
    RUNNING.load(Ordering::Relaxed)
}

fn table() -> MutexGuard<'static, Option<Profile>> {
    // A panic while the lock was held leaves counters, not broken invariants: keep them.
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Adds one call of `node` (operator `op`) taking `d` to the table. Executors call it only
/// when [`running`] said so at the start of their pass.
pub fn record(op: &'static str, node: &str, pass: Pass, d: Duration) {
    let mut t = table();
    let p = t.get_or_insert_with(Profile::default);
    p.ops.entry((op, pass)).or_default().add(d);
    let slot = pass as usize;
    match p.nodes.get_mut(node) {
        Some(row) => {
            row[slot].0 = Some(op);
            row[slot].1.add(d);
        }
        None => {
            let mut row = [(None, Stat::default()); 2];
            row[slot].0 = Some(op);
            row[slot].1.add(d);
            p.nodes.insert(node.to_string(), row);
        }
    }
}

/// A copy of the table so far (empty when nothing was recorded).
pub fn snapshot() -> Profile {
    table().clone().unwrap_or_default()
}

/// Clears the table.
pub fn reset() {
    *table() = None;
}

/// The table as text: the operators, then the layers, each sorted by total time, with calls,
/// total and mean milliseconds and the share of all recorded time. With `reset`, the
/// counters are cleared after reading (MXNet's `dumps(reset=True)`).
pub fn dumps(reset: bool) -> String {
    let p = {
        let mut t = table();
        if reset {
            t.take()
        } else {
            t.clone()
        }
    }
    .unwrap_or_default();
    render(&p)
}

/// Renders a [`Profile`] (see [`dumps`]).
pub fn render(p: &Profile) -> String {
    let all: Duration = p.ops.values().map(|s| s.total).sum();
    let share = |d: Duration| {
        if all.is_zero() {
            0.0
        } else {
            100.0 * d.as_secs_f64() / all.as_secs_f64()
        }
    };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mut out = format!(
        "Profile: {:.3} ms in {} operator calls (forward and backward of every executor node)\n",
        ms(all),
        p.ops.values().map(|s| s.count).sum::<u64>()
    );
    let mut ops: Vec<_> = p.ops.iter().collect();
    ops.sort_by(|a, b| b.1.total.cmp(&a.1.total).then(a.0.cmp(b.0)));
    let w = ops
        .iter()
        .map(|((o, _), _)| o.len())
        .max()
        .unwrap_or(0)
        .max(8);
    let _ = writeln!(
        out,
        "\n{:<w$}  {:<8}  {:>8}  {:>12}  {:>10}  {:>6}",
        "Operator", "Pass", "Calls", "Total ms", "Mean ms", "%"
    );
    for ((op, pass), s) in ops {
        let _ = writeln!(
            out,
            "{:<w$}  {:<8}  {:>8}  {:>12.3}  {:>10.4}  {:>6.2}",
            op,
            pass.name(),
            s.count,
            ms(s.total),
            ms(s.total) / s.count.max(1) as f64,
            share(s.total)
        );
    }
    let mut nodes: Vec<(&str, &'static str, Pass, Stat)> = p
        .nodes
        .iter()
        .flat_map(|(n, row)| {
            [Pass::Forward, Pass::Backward]
                .into_iter()
                .filter_map(move |pass| {
                    let (op, s) = row[pass as usize];
                    op.map(|op| (n.as_str(), op, pass, s))
                })
        })
        .collect();
    nodes.sort_by(|a, b| b.3.total.cmp(&a.3.total).then((a.0, a.2).cmp(&(b.0, b.2))));
    let wn = nodes.iter().map(|n| n.0.len()).max().unwrap_or(0).max(5);
    let _ = writeln!(
        out,
        "\n{:<wn$}  {:<w$}  {:<8}  {:>8}  {:>12}  {:>10}  {:>6}",
        "Layer", "Operator", "Pass", "Calls", "Total ms", "Mean ms", "%"
    );
    for (n, op, pass, s) in nodes {
        let _ = writeln!(
            out,
            "{:<wn$}  {:<w$}  {:<8}  {:>8}  {:>12.3}  {:>10.4}  {:>6.2}",
            n,
            op,
            pass.name(),
            s.count,
            ms(s.total),
            ms(s.total) / s.count.max(1) as f64,
            share(s.total)
        );
    }
    out
}
