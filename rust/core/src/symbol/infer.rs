//! Shape and dtype inference over a symbol's graph.

use super::{Entry, Node, Symbol};
use crate::error::{Error, Result};
use crate::ops::{self, MaybeShape};
use crate::tensor::DType;
use std::collections::HashMap;
use std::sync::Arc;

/// Shapes from `infer_shape`: (arguments, outputs, auxiliary states), each in list order.
pub type InferredShapes = (Vec<Vec<usize>>, Vec<Vec<usize>>, Vec<Vec<usize>>);

impl Symbol {
    /// Infers argument, output and auxiliary shapes from the known ones (by variable name).
    /// Variables' `__shape__` attributes count as known (a 0 dimension means unknown). An
    /// argument that stays unknown is an error naming it and the node that needs it.
    ///
    /// A creation node whose shape has unknown (0) sizes — MXNet's `_zeros(shape=(0, 200))`
    /// begin states — takes its shape from its consumers, as in MXNet: from an op that fills
    /// the input in (an elementwise partner, the `RNN` operator's state), or, for an op that
    /// cannot (a FullyConnected over the state), by completing the unknown sizes from the
    /// consumer's own output shape where its shape function confirms that completion.
    pub fn infer_shape(&self, known: &HashMap<String, Vec<usize>>) -> Result<InferredShapes> {
        let g = self.infer_node_shapes(known)?;
        let aux_set = self.aux_variable_ptrs(&g.nodes);
        let mut args = Vec::new();
        let mut auxs = Vec::new();
        for (i, n) in g.nodes.iter().enumerate() {
            if !n.is_variable() {
                continue;
            }
            let s = g.shapes[i][0].clone().ok_or_else(|| {
                Error::invalid(
                    format!("infer_shape: argument \"{}\"", n.name),
                    "a shape (give it, or an input it can be inferred from)",
                    "no shape",
                )
            })?;
            if aux_set.contains(&(Arc::as_ptr(n) as usize)) {
                auxs.push(s)
            } else {
                args.push(s)
            }
        }
        let mut outs = Vec::new();
        for h in &self.heads {
            outs.push(g.shape_of(h).clone().ok_or_else(|| {
                Error::invalid(
                    format!("infer_shape: output \"{}\"", h.node.output_name(h.index)),
                    "a shape",
                    "no shape",
                )
            })?);
        }
        Ok((args, outs, auxs))
    }

    /// The graph an executor runs for these input shapes: this symbol, or — when creation
    /// nodes have unknown (0) sizes — a copy whose creation nodes carry the inferred shapes
    /// (so they make arrays of the batch's size). `None`: nothing to resolve.
    pub fn with_inferred_creation_shapes(
        &self,
        known: &HashMap<String, Vec<usize>>,
    ) -> Result<Option<Symbol>> {
        let nodes = self.topo_nodes();
        let partial = |n: &Node| {
            n.inst
                .as_ref()
                .is_some_and(|i| i.partial_output_shape().is_some())
        };
        if !nodes.iter().any(|n| partial(n)) {
            return Ok(None);
        }
        let g = self.infer_node_shapes(known)?;
        let mut copies: HashMap<usize, Arc<Node>> = HashMap::new();
        for (i, n) in g.nodes.iter().enumerate() {
            let inputs: Vec<Entry> = n
                .inputs
                .iter()
                .map(|e| Entry {
                    node: copies[&(Arc::as_ptr(&e.node) as usize)].clone(),
                    index: e.index,
                    version: e.version,
                })
                .collect();
            let copy = match (n.op, partial(n)) {
                (Some(def), true) => {
                    let shape = g.shapes[i][0].as_ref().ok_or_else(|| {
                        Error::Msg(format!("internal: no inferred shape for {}", n.name))
                    })?;
                    let mut attrs = n.attrs.clone();
                    attrs.insert(
                        "shape".into(),
                        crate::error::tuple_text(&format!("{shape:?}")),
                    );
                    let inst = def.instantiate(&n.name, &attrs)?;
                    Node::new(Some(def), Some(inst), n.name.clone(), attrs, inputs)
                }
                _ if n.is_variable() => n.clone(),
                _ => Node::new(
                    n.op,
                    n.inst.clone(),
                    n.name.clone(),
                    n.attrs.clone(),
                    inputs,
                ),
            };
            copies.insert(Arc::as_ptr(n) as usize, copy);
        }
        Ok(Some(Symbol {
            heads: self
                .heads
                .iter()
                .map(|h| Entry {
                    node: copies[&(Arc::as_ptr(&h.node) as usize)].clone(),
                    index: h.index,
                    version: h.version,
                })
                .collect(),
        }))
    }

    /// Every node's output shapes (`None`: unknown) from the known variable shapes.
    fn infer_node_shapes(&self, known: &HashMap<String, Vec<usize>>) -> Result<NodeShapes> {
        let nodes = self.topo_nodes();
        let index: HashMap<usize, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (Arc::as_ptr(n) as usize, i))
            .collect();
        let mut g = NodeShapes {
            shapes: nodes.iter().map(|n| vec![None; n.num_outputs()]).collect(),
            nodes,
            index,
        };
        for (i, n) in g.nodes.iter().enumerate() {
            if n.is_variable() {
                if let Some(s) = known.get(&n.name) {
                    g.shapes[i][0] = Some(s.clone());
                } else if let Some(s) = shape_attr(n) {
                    // a hint with unknown (0) sizes waits for the nodes that use it
                    if !s.contains(&0) {
                        g.shapes[i][0] = Some(s);
                    }
                }
            }
        }
        // Two sweeps over every node: the second lets shapes that ops filled in (weights,
        // labels) flow on. Nodes still waiting for an input then get more sweeps while they
        // make progress (chains through creation nodes of unknown size, inputs completed
        // backwards from outputs a later node fills); the last one reports.
        let mut waiting: Vec<usize> = Vec::new();
        for _ in 0..2 {
            waiting.clear();
            for i in 0..g.nodes.len() {
                if !g.visit(i, true)? {
                    waiting.push(i);
                }
            }
        }
        while !waiting.is_empty() {
            let before = waiting.len();
            let mut still = Vec::new();
            for &i in &waiting {
                if !g.visit(i, true)? {
                    still.push(i);
                }
            }
            if still.len() == before {
                for &i in &still {
                    g.visit(i, false)?;
                }
                break;
            }
            waiting = still;
        }
        for (i, n) in g.nodes.iter().enumerate() {
            // A shape the caller gives a variable stands over its `__shape__` hint.
            let Some(partial) = partial_hint(n).filter(|_| !known.contains_key(&n.name)) else {
                continue;
            };
            let fits = |s: &Vec<usize>| {
                s.len() == partial.len() && s.iter().zip(&partial).all(|(&d, &p)| p == 0 || d == p)
            };
            match &g.shapes[i][0] {
                Some(s) if fits(s) => {}
                // an argument left unknown is reported by name where it is listed
                None if n.is_variable() => {}
                other => {
                    return Err(Error::invalid(
                        if n.is_variable() {
                            format!("variable \"{}\": shape (its __shape__ attribute)", n.name)
                        } else {
                            format!("{} node \"{}\": shape", n.op_name(), n.name)
                        },
                        format!(
                            "{} with its unknown (0) sizes inferred from the nodes that use it",
                            crate::error::tuple_text(&format!("{partial:?}"))
                        ),
                        match other {
                            Some(s) => crate::error::tuple_text(&format!("{s:?}")),
                            None => "nothing that infers them (give the shape in full, or the \
                                     state as an input)"
                                .to_string(),
                        },
                    ))
                }
            }
        }
        Ok(g)
    }

    /// Infers argument, output and auxiliary dtypes (float32 where nothing says otherwise).
    pub fn infer_type(
        &self,
        known: &HashMap<String, DType>,
    ) -> Result<(Vec<DType>, Vec<DType>, Vec<DType>)> {
        let nodes = self.topo_nodes();
        let index: HashMap<usize, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (Arc::as_ptr(n) as usize, i))
            .collect();
        let mut types: Vec<Vec<Option<DType>>> =
            nodes.iter().map(|n| vec![None; n.num_outputs()]).collect();
        for (i, n) in nodes.iter().enumerate() {
            if n.is_variable() {
                types[i][0] = known.get(&n.name).copied().or_else(|| {
                    n.attrs
                        .get("__dtype__")
                        .and_then(|f| f.parse::<i32>().ok())
                        .and_then(DType::from_mxnet_flag)
                });
            }
        }
        for (i, n) in nodes.iter().enumerate() {
            let Some(inst) = &n.inst else { continue };
            let na = n.num_arguments();
            let get = |e: &Entry| types[index[&(Arc::as_ptr(&e.node) as usize)]][e.index];
            let mut ins: Vec<Option<DType>> = n.inputs[..na].iter().map(get).collect();
            let mut aux: Vec<Option<DType>> = n.inputs[na..].iter().map(get).collect();
            let outs = inst.infer_type(&mut ins, &mut aux)?;
            for (e, t) in n.inputs.iter().zip(ins.into_iter().chain(aux)) {
                let j = index[&(Arc::as_ptr(&e.node) as usize)];
                if types[j][e.index].is_none() {
                    types[j][e.index] = t;
                }
            }
            for (k, t) in outs.into_iter().enumerate() {
                if k < types[i].len() {
                    types[i][k] = Some(t);
                }
            }
        }
        let aux_set = self.aux_variable_ptrs(&nodes);
        let (mut args, mut auxs) = (Vec::new(), Vec::new());
        for (i, n) in nodes.iter().enumerate() {
            if n.is_variable() {
                let t = types[i][0].unwrap_or(DType::Float32);
                if aux_set.contains(&(Arc::as_ptr(n) as usize)) {
                    auxs.push(t)
                } else {
                    args.push(t)
                }
            }
        }
        let outs = self
            .heads
            .iter()
            .map(|h| {
                types[index[&(Arc::as_ptr(&h.node) as usize)]][h.index].unwrap_or(DType::Float32)
            })
            .collect();
        Ok((args, outs, auxs))
    }
}

/// Output shapes of every node of a graph during inference, in topological order.
struct NodeShapes {
    nodes: Vec<Arc<Node>>,
    /// Node address → position in `nodes`.
    index: HashMap<usize, usize>,
    /// `shapes[i][k]`: output `k` of node `i`, `None` while unknown.
    shapes: Vec<Vec<Option<Vec<usize>>>>,
}

impl NodeShapes {
    fn shape_of(&self, e: &Entry) -> &Option<Vec<usize>> {
        &self.shapes[self.index[&(Arc::as_ptr(&e.node) as usize)]][e.index]
    }

    /// Runs node `i`'s shape function over what is known and records what it gives (its
    /// outputs, and the inputs it filled in). `Ok(false)`: it waits for an unknown input
    /// (only when `may_wait`; otherwise that is the error).
    fn visit(&mut self, i: usize, may_wait: bool) -> Result<bool> {
        let n = self.nodes[i].clone();
        let Some(inst) = &n.inst else {
            return Ok(true);
        };
        if inst.partial_output_shape().is_some() {
            // Its consumers give it its shape; checked after the sweeps.
            return Ok(true);
        }
        let na = n.num_arguments();
        let mut ins: Vec<Option<Vec<usize>>> = n.inputs[..na]
            .iter()
            .map(|e| self.shape_of(e).clone())
            .collect();
        let mut aux: Vec<Option<Vec<usize>>> = n.inputs[na..]
            .iter()
            .map(|e| self.shape_of(e).clone())
            .collect();
        let outs = match inst.infer_shape(&n.name, &mut ins, &mut aux) {
            Ok(outs) => outs,
            Err(e) if is_unknown_input(&e) => match self.complete_unknown_inputs(&n, i) {
                Ok(Some((filled, outs))) => {
                    (ins, aux) = (filled[..na].to_vec(), filled[na..].to_vec());
                    outs
                }
                // other nodes may still fill inputs in; the last sweep reports
                Ok(None) | Err(_) if may_wait => return Ok(false),
                Ok(None) => return Err(self.context(&n, e)),
                Err(e) => return Err(self.context(&n, e)),
            },
            Err(e) => return Err(self.context(&n, e)),
        };
        for (e, s) in n.inputs.iter().zip(ins.into_iter().chain(aux)) {
            let j = self.index[&(Arc::as_ptr(&e.node) as usize)];
            if let Some(s) = s {
                match &self.shapes[j][e.index] {
                    Some(old) if *old != s => {
                        return Err(Error::shape(
                            n.op_name(),
                            format!(
                                "node \"{}\": input \"{}\"",
                                n.name,
                                e.node.output_name(e.index)
                            ),
                            s,
                            old,
                        ));
                    }
                    _ => self.shapes[j][e.index] = Some(s),
                }
            }
        }
        for (k, s) in outs.into_iter().enumerate() {
            if k < self.shapes[i].len() {
                self.shapes[i][k] = Some(s);
            }
        }
        Ok(true)
    }

    /// For node `i` waiting on unknown inputs while its own outputs are known (another node
    /// filled them): completes the inputs from those outputs as MXNet's shape functions do,
    /// and keeps a completion only when the node's shape function then gives exactly the
    /// known outputs. Returns the inputs (arguments then auxiliary states) and outputs.
    ///
    /// Inputs with a partial shape (a creation node's `_zeros((0, H))`, a variable's
    /// `__shape__` of `(H, 0)`: Gluon's deferred input size) get their unknown (0) sizes from
    /// the same axes of the first output (elementwise partners), else the one unknown size
    /// that keeps the first output's element count (a `Reshape` of the weight). Failing
    /// those, the op completes what its own shape function can
    /// ([`ops::Operator::infer_inputs_from_outputs`]).
    fn complete_unknown_inputs(
        &self,
        n: &Node,
        i: usize,
    ) -> Result<Option<(Vec<MaybeShape>, Vec<Vec<usize>>)>> {
        let Some(known_outs) = self.shapes[i].iter().cloned().collect::<Option<Vec<_>>>() else {
            return Ok(None);
        };
        let Some(first) = known_outs.first() else {
            return Ok(None);
        };
        let current: Vec<MaybeShape> = n.inputs.iter().map(|e| self.shape_of(e).clone()).collect();
        for rule in [
            same_axes as fn(&[usize], &[usize]) -> Option<Vec<usize>>,
            same_size,
        ] {
            let mut filled = current.clone();
            let mut completed = false;
            for (slot, e) in filled.iter_mut().zip(&n.inputs) {
                if slot.is_none() {
                    if let Some(g) = partial_hint(&e.node).and_then(|p| rule(&p, first)) {
                        *slot = Some(g);
                        completed = true;
                    }
                }
            }
            if completed {
                if let Some(done) = confirm(n, filled, &known_outs) {
                    return Ok(Some(done));
                }
            }
        }
        let Some(inst) = &n.inst else { return Ok(None) };
        let na = n.num_arguments();
        let mut filled = current.clone();
        inst.infer_inputs_from_outputs(&n.name, &mut filled[..na], &known_outs)?;
        Ok(if filled == current {
            None
        } else {
            confirm(n, filled, &known_outs)
        })
    }

    /// `e` with the variables behind the node's argument names, so the user sees
    /// "weight = fc_weight" next to the op's own wording.
    fn context(&self, n: &Node, e: Error) -> Error {
        let Some(inst) = &n.inst else { return e };
        let names: Vec<String> = inst
            .arguments()
            .into_iter()
            .chain(inst.aux_states())
            .collect();
        let feeds: Vec<String> = names
            .iter()
            .zip(&n.inputs)
            .map(|(a, e)| format!("{a} = {}", e.node.output_name(e.index)))
            .collect();
        Error::Context {
            context: format!("infer_shape ({})", feeds.join(", ")),
            source: Box::new(e),
        }
    }
}

/// `n`'s inputs `filled` (arguments then auxiliary states) with the outputs its shape function
/// gives from them, when those are the `known` outputs (hidden outputs aside).
fn confirm(
    n: &Node,
    filled: Vec<MaybeShape>,
    known: &[Vec<usize>],
) -> Option<(Vec<MaybeShape>, Vec<Vec<usize>>)> {
    let na = n.num_arguments();
    let (mut ins, mut aux) = (filled[..na].to_vec(), filled[na..].to_vec());
    let outs = n
        .inst
        .as_ref()?
        .infer_shape(&n.name, &mut ins, &mut aux)
        .ok()?;
    let visible = outs.len().min(known.len());
    (outs[..visible] == known[..visible]).then(|| (ins.into_iter().chain(aux).collect(), outs))
}

/// A variable's `__shape__` attribute (0: an unknown size).
fn shape_attr(n: &Node) -> Option<Vec<usize>> {
    let s = ops::params::parse_shape(n.attrs.get("__shape__")?)?;
    Some(s.iter().map(|&d| usize::try_from(d).unwrap_or(0)).collect())
}

/// The partial shape a node's output is known to have: a creation node's shape with unknown
/// (0) sizes, or a variable's `__shape__` with some.
fn partial_hint(n: &Node) -> Option<Vec<usize>> {
    if n.is_variable() {
        shape_attr(n).filter(|s| s.contains(&0))
    } else {
        n.inst.as_ref()?.partial_output_shape()
    }
}

/// `partial`'s unknown sizes from the same axes of `out` (an elementwise partner's output).
fn same_axes(partial: &[usize], out: &[usize]) -> Option<Vec<usize>> {
    let g: Vec<usize> = partial
        .iter()
        .enumerate()
        .map(|(k, &d)| {
            if d == 0 {
                out.get(k).copied().unwrap_or(0)
            } else {
                d
            }
        })
        .collect();
    (!g.contains(&0)).then_some(g)
}

/// `partial`'s one unknown size chosen so it holds as many elements as `out` (a reshape).
fn same_size(partial: &[usize], out: &[usize]) -> Option<Vec<usize>> {
    let at = partial.iter().position(|&d| d == 0)?;
    if partial.iter().filter(|&&d| d == 0).count() != 1 {
        return None;
    }
    let rest: usize = partial.iter().filter(|&&d| d != 0).product();
    let size: usize = out.iter().product();
    if size == 0 || !size.is_multiple_of(rest) {
        return None;
    }
    let mut g = partial.to_vec();
    g[at] = size / rest;
    Some(g)
}

/// True for the error an op's `infer_shape` gives when an input it needs is still unknown
/// (retried after other nodes have filled shapes in).
fn is_unknown_input(e: &Error) -> bool {
    matches!(e.root(), Error::Invalid { got, .. } if got == ops::UNKNOWN_SHAPE)
}
