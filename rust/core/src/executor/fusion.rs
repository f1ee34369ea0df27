//! Fusion plans, made once at bind: which op's forward also computes the op after it.
//!
//! An in-place elementwise op (relu, tanh, sigmoid, clip) applied to its producer's output
//! while in cache ([`fusions`]); and, at inference, BatchNorm's per-channel map folded into the
//! convolution's weights and bias ([`folds`]) or applied as the convolution reads its input
//! ([`mapped_inputs`]), and a residual add run over its producer's output ([`residuals`]).
//! The executor runs a planned fusion when the pass allows it (no monitor; for the inexact
//! ones, no gradient) and otherwise runs each op on its own, so every plan is only ever an
//! optimisation.

use super::Step;
use crate::ops::InPlace;

/// For each step, the steps that read its outputs (once per input slot).
pub(super) fn readers(steps: &[Step]) -> Vec<Vec<usize>> {
    let mut readers: Vec<Vec<usize>> = vec![vec![]; steps.len()];
    for (j, st) in steps.iter().enumerate() {
        for &(s, _) in &st.inputs {
            readers[s].push(j);
        }
    }
    readers
}

/// For each step, the step of an in-place elementwise op ([`Operator::in_place`]: relu,
/// tanh, sigmoid, clip) that its forward can apply to its output while in cache
/// ([`Operator::forward_then`]): the step's first output is read by that op alone, its other
/// outputs (BatchNorm's saved statistics) by none, and none is a graph output. The fused pair
/// keeps one array for both outputs: the elementwise op's backward then sees its output as its
/// input, which its derivative allows for [`InPlace::keeps_gradient`] maps (the others fuse
/// only when no gradient is taken).
pub(super) fn fusions(steps: &[Step], heads: &[(usize, usize)]) -> Vec<Option<(usize, InPlace)>> {
    sole_readers(steps, heads)
        .into_iter()
        .enumerate()
        .map(|(i, j)| {
            let j = j?;
            let map = steps[j].node.inst.as_ref()?.in_place()?;
            (steps[j].inputs == [(i, 0)]).then_some((j, map))
        })
        .collect()
}

/// For each step, the step that may fold into it as a per-channel affine map
/// ([`crate::ops::Operator::inference_affine`], BatchNorm, into
/// [`crate::ops::Operator::forward_affine`], Convolution): the step's output is read by that op
/// alone, as its data (first) input, and is not a graph output. Whether the two ops support it
/// is asked when the pass runs (BatchNorm is an affine map only with its moving statistics).
pub(super) fn folds(steps: &[Step], heads: &[(usize, usize)]) -> Vec<Option<usize>> {
    sole_readers(steps, heads)
        .into_iter()
        .enumerate()
        .map(|(i, j)| {
            let j = j?;
            // The map's parameters (gamma, beta, the statistics) must be known when step i
            // runs: variables, or computed before it.
            let data_only = steps[j].inputs.first() == Some(&(i, 0))
                && steps[j].inputs[1..]
                    .iter()
                    .all(|&(s, _)| s < i || steps[s].var.is_some());
            (data_only && steps[j].node.inst.is_some()).then_some(j)
        })
        .collect()
}

/// A residual add that a step's forward may run over its output ([`residuals`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Residual {
    /// The add's step.
    pub add: usize,
    /// The add's other input (step, output).
    pub other: (usize, usize),
}

/// For each step, the same-shape add ([`crate::ops::Operator::same_shape_add`], elemwise_add)
/// that its forward may run over its output while in cache: ResNet's and MobileNet v2's
/// shortcut joins, where the add otherwise reads both operands back and writes a third array.
/// The step's output is read by that add alone (once) and is not a graph output, and the
/// add's other input comes from an earlier step. The fused output holds the add's values, not
/// the step's own, so only inference passes run the plan; whether the op takes an epilogue is
/// asked when the pass runs, where the step that runs it (a convolution the step is folded
/// into) must also come after the other input.
pub(super) fn residuals(steps: &[Step], heads: &[(usize, usize)]) -> Vec<Option<Residual>> {
    sole_readers(steps, heads)
        .into_iter()
        .enumerate()
        .map(|(i, j)| {
            let j = j?;
            if !steps[j].node.inst.as_ref()?.same_shape_add() {
                return None;
            }
            let other = match steps[j].inputs[..] {
                [a, b] if a == (i, 0) => b,
                [a, b] if b == (i, 0) => a,
                _ => return None,
            };
            (other.0 < i).then_some(Residual { add: j, other })
        })
        .collect()
}

/// A step whose data input may come through the map of the BatchNorm before it, and of the
/// activation after that ([`mapped_inputs`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct MappedInput {
    /// The BatchNorm's step.
    pub bn: usize,
    /// The activation's step and map, if one comes between.
    pub act: Option<(usize, InPlace)>,
}

/// For each step, the BatchNorm (and in-place activation, [`Operator::in_place`]) before it
/// whose map it may apply to its data (first) input as it reads it
/// ([`crate::ops::Operator::forward_prepared_mapped`]): pre-activation networks (DenseNet,
/// ResNet v2) run BatchNorm → ReLU → convolution where no convolution comes before the
/// BatchNorm to fold it into. Each output in the chain is read by the next step alone (once,
/// as its data) and is not a graph output; the BatchNorm's parameters and statistics are
/// bound variables. Whether the ops support it is asked when the pass runs; a BatchNorm
/// folded into the convolution before it ([`folds`], at no cost at all) is not mapped.
pub(super) fn mapped_inputs(steps: &[Step], heads: &[(usize, usize)]) -> Vec<Option<MappedInput>> {
    let sole = sole_readers(steps, heads);
    let feeds = |s: usize, k: usize| sole[s] == Some(k) && steps[k].inputs.first() == Some(&(s, 0));
    // An op with auxiliary states (BatchNorm's moving statistics) and nothing but bound
    // variables after its data; whether it is a per-channel map in the pass is asked when it
    // runs (`Operator::inference_affine`).
    let may_map = |i: usize| {
        steps[i].node.inst.is_some()
            && steps[i].inputs.len() > steps[i].args
            && steps[i].inputs[1..]
                .iter()
                .all(|&(p, _)| steps[p].var.is_some())
    };
    (0..steps.len())
        .map(|k| {
            let &(s, _) = steps[k].inputs.first()?;
            // The reader has parameters to prepare (a convolution's weight).
            if steps[k].node.inst.is_none() || steps[k].inputs.len() < 2 {
                return None;
            }
            if !feeds(s, k) {
                return None;
            }
            if may_map(s) {
                return Some(MappedInput { bn: s, act: None });
            }
            let map = steps[s].node.inst.as_ref()?.in_place()?;
            let &[(i, 0)] = &steps[s].inputs[..] else {
                return None;
            };
            (feeds(i, s) && may_map(i)).then_some(MappedInput {
                bn: i,
                act: Some((s, map)),
            })
        })
        .collect()
}

/// For each op step that is not a graph output: the one step reading its outputs, if only one
/// does (through one input slot).
fn sole_readers(steps: &[Step], heads: &[(usize, usize)]) -> Vec<Option<usize>> {
    let readers = readers(steps);
    steps
        .iter()
        .enumerate()
        .map(|(i, st)| {
            if st.var.is_some() || heads.iter().any(|&(s, _)| s == i) {
                return None;
            }
            match readers[i][..] {
                [j] => Some(j),
                _ => None,
            }
        })
        .collect()
}
