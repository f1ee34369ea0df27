//! The block size of inference passes over a batch (see the executor's sample blocks): a
//! cache-blocking choice the module makes at bind, from the graph and its shapes.

use super::Module;
use crate::io::DataDesc;
use crate::kernels::tuning::INFERENCE_BLOCK_BYTES;
use crate::symbol::Symbol;
use std::collections::HashMap;

/// Operators that compute each sample from that sample alone at inference (axis 0 the batch):
/// a graph of only these can run in blocks of samples. Concat joins along its `dim`, which
/// must not be 0.
const PER_SAMPLE_OPS: &[&str] = &[
    "null",
    "Activation",
    "BatchNorm",
    "Concat",
    "Convolution",
    "Deconvolution",
    "Dropout",
    "Flatten",
    "FullyConnected",
    "LeakyReLU",
    "Pooling",
    "SoftmaxOutput",
    "clip",
    "elemwise_add",
    "elemwise_mul",
    "relu",
    "sigmoid",
    "tanh",
];

/// Whether every op of `symbol` treats samples independently (see [`PER_SAMPLE_OPS`]).
fn per_sample(symbol: &Symbol) -> bool {
    symbol.topo_nodes().iter().all(|n| {
        let op = n.op_name();
        PER_SAMPLE_OPS.contains(&op)
            && (op != "Concat"
                || n.attrs
                    .get("dim")
                    .is_none_or(|d| d.trim().parse::<i64>().is_ok_and(|d| d > 0)))
    })
}

/// Samples per inference pass over a batch of `batch` bound with `shapes`, when fewer than
/// the batch: the largest divisor of the batch whose widest activation (the largest output of
/// any op, per sample, times the block) stays within [`INFERENCE_BLOCK_BYTES`]; 1 when one
/// sample's is already wider. `None` for one pass over the whole batch: a graph with an op
/// that is not per-sample, or one whose activations fit.
pub(super) fn inference_block(
    symbol: &Symbol,
    shapes: &HashMap<String, Vec<usize>>,
    batch: usize,
) -> Option<usize> {
    if batch < 2 || !per_sample(symbol) {
        return None;
    }
    let internals = symbol.get_internals();
    let (_, outs, _) = internals.infer_shape(shapes).ok()?;
    let nodes = symbol.topo_nodes();
    let kinds = nodes
        .iter()
        .flat_map(|n| (0..n.num_visible_outputs()).map(move |_| n.is_variable()));
    let widest = outs
        .iter()
        .zip(kinds)
        .filter(|(_, variable)| !variable)
        .map(|(s, _)| s.iter().product::<usize>() * 4 / batch)
        .max()?;
    let block = (1..=batch)
        .rev()
        .filter(|b| batch.is_multiple_of(*b))
        .find(|b| b * widest <= INFERENCE_BLOCK_BYTES)
        .unwrap_or(1);
    (block < batch).then_some(block)
}

impl Module {
    /// Sets the sample blocks of an inference bind on one device (see [`inference_block`]):
    /// data and labels must carry the batch on axis 0.
    pub(super) fn set_inference_blocks(&mut self, data: &[DataDesc], label: &[DataDesc]) {
        if self.for_training || self.execs.len() != 1 {
            return;
        }
        let descs: Vec<&DataDesc> = data.iter().chain(label).collect();
        if descs.iter().any(|d| d.batch_axis() != Some(0)) {
            return;
        }
        let batch = self.batch_size;
        let shapes: HashMap<String, Vec<usize>> = descs
            .iter()
            .map(|d| (d.name.clone(), d.shape.clone()))
            .collect();
        if let Some(block) = inference_block(&self.symbol, &shapes, batch) {
            // Labels bound without shapes carry the batch too (SoftmaxOutput's, inferred).
            let args = self.symbol.list_arguments();
            let names: Vec<String> = descs
                .iter()
                .map(|d| d.name.clone())
                .chain(
                    self.label_names
                        .iter()
                        .filter(|n| args.contains(n))
                        .cloned(),
                )
                .collect::<std::collections::BTreeSet<String>>()
                .into_iter()
                .collect();
            // A graph that would not take these at the block's size runs whole batches.
            let _ = self.execs[0].set_sample_blocks(&names, block);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(name: &str, attrs: &[(&str, &str)], inputs: Vec<Symbol>) -> Symbol {
        Symbol::create(
            name,
            None,
            attrs,
            inputs.into_iter().map(|s| (None, s)).collect(),
        )
        .unwrap()
    }

    /// A 3×3 convolution to 16 filters, then `tail` (the rest of the graph) over it.
    fn net(tail: impl Fn(Symbol) -> Symbol) -> Symbol {
        let conv = op(
            "Convolution",
            &[
                ("kernel", "(3, 3)"),
                ("pad", "(1, 1)"),
                ("num_filter", "16"),
            ],
            vec![Symbol::variable("data")],
        );
        tail(op("Activation", &[("act_type", "relu")], vec![conv]))
    }

    fn shapes(batch: usize, size: usize) -> HashMap<String, Vec<usize>> {
        HashMap::from([("data".to_string(), vec![batch, 3, size, size])])
    }

    /// The block is the largest divisor of the batch whose widest activation fits (16
    /// filters at 256²: 4 MB per sample); small activations, one sample, and graphs with an
    /// op that mixes samples run whole.
    #[test]
    fn blocks_keep_the_widest_activation_within_the_limit() {
        let plain = net(|x| x);
        let per_sample = 16 * 256 * 256 * 4;
        let fits = (INFERENCE_BLOCK_BYTES / per_sample).max(1);
        let want = (1..=fits).rev().find(|b| 12 % b == 0).unwrap();
        assert_eq!(inference_block(&plain, &shapes(12, 256), 12), Some(want));
        assert_eq!(inference_block(&plain, &shapes(7, 1024), 7), Some(1));
        assert_eq!(inference_block(&plain, &shapes(8, 16), 8), None);
        assert_eq!(inference_block(&plain, &shapes(1, 1024), 1), None);
        let concat = |dim: &'static str| {
            net(move |x| {
                op(
                    "Concat",
                    &[("dim", dim), ("num_args", "2")],
                    vec![x.clone(), x],
                )
            })
        };
        assert!(inference_block(&concat("1"), &shapes(12, 256), 12).is_some());
        assert_eq!(inference_block(&concat("0"), &shapes(12, 256), 12), None);
        let reshaped = net(|x| op("Reshape", &[("shape", "(-1,)")], vec![x]));
        assert_eq!(inference_block(&reshaped, &shapes(12, 256), 12), None);
    }
}
