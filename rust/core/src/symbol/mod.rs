//! Symbols: MXNet-compatible computation graphs — variables, operator nodes, composition with
//! MXNet's automatic names, listing, shape / type inference, and the JSON format (`json`).

mod infer;
pub mod json;

pub use infer::InferredShapes;

use crate::error::{Error, Result};
use crate::ops::{self, OpDef, Operator};

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// One graph node: a variable (`op` is None) or an operator application.
#[derive(Debug)]
pub struct Node {
    /// The registry entry, None for a variable.
    pub op: Option<&'static OpDef>,
    /// The parsed operator instance, None for a variable.
    pub inst: Option<Arc<dyn Operator>>,
    /// The node name (`fc1`, `data`).
    pub name: String,
    /// String attributes: operator parameters as given, and reserved `__x__` keys.
    pub attrs: BTreeMap<String, String>,
    /// Inputs: the operator's arguments, then its auxiliary states.
    pub inputs: Vec<Entry>,
    /// How many composed operators mutate this variable (its entries' versions).
    mutations: AtomicU32,
}

impl Drop for Node {
    /// Drops a deep graph without recursion: the inputs this node was the last owner of are
    /// unlinked onto a work list first, so dropping a chain of 200k nodes cannot overflow the
    /// stack (the default drop would recurse once per node).
    fn drop(&mut self) {
        let mut last_owned: Vec<Arc<Node>> = self.inputs.drain(..).map(|e| e.node).collect();
        while let Some(node) = last_owned.pop() {
            if let Some(mut node) = Arc::into_inner(node) {
                last_owned.extend(node.inputs.drain(..).map(|e| e.node));
            }
        }
    }
}

/// One output of a node, as an input of another: `[node, index, version]` in JSON.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The producing node.
    pub node: Arc<Node>,
    /// Which of its outputs.
    pub index: usize,
    /// Mutation version (non-zero on inputs an operator mutates, e.g. BatchNorm's aux).
    pub version: u32,
}

/// A symbol: a list of output entries of a graph.
///
/// ```
/// use mxfn_core::symbol::Symbol;
/// let data = Symbol::variable("data");
/// let fc = Symbol::create("FullyConnected", Some("fc1"), &[("num_hidden", "10")], vec![(None, data)]).unwrap();
/// assert_eq!(fc.list_arguments(), vec!["data", "fc1_weight", "fc1_bias"]);
/// assert_eq!(fc.list_outputs(), vec!["fc1_output"]);
/// ```
#[derive(Clone, Debug)]
pub struct Symbol {
    /// The outputs.
    pub heads: Vec<Entry>,
}

impl Node {
    /// A new node.
    pub fn new(
        op: Option<&'static OpDef>,
        inst: Option<Arc<dyn Operator>>,
        name: String,
        attrs: BTreeMap<String, String>,
        inputs: Vec<Entry>,
    ) -> Arc<Node> {
        Arc::new(Node {
            op,
            inst,
            name,
            attrs,
            inputs,
            mutations: AtomicU32::new(0),
        })
    }

    /// True for a variable.
    pub fn is_variable(&self) -> bool {
        self.op.is_none()
    }

    /// The operator's name (`"null"` for a variable, as in JSON).
    pub fn op_name(&self) -> &'static str {
        self.op.map_or("null", |d| d.name)
    }

    /// Number of outputs, hidden ones included.
    pub fn num_outputs(&self) -> usize {
        self.inst.as_ref().map_or(1, |i| i.num_outputs())
    }

    /// Number of outputs in MXNet's graph (the JSON `node_row_ptr`).
    pub fn num_graph_outputs(&self) -> usize {
        self.inst.as_ref().map_or(1, |i| i.num_graph_outputs())
    }

    /// Number of visible outputs.
    pub fn num_visible_outputs(&self) -> usize {
        self.inst.as_ref().map_or(1, |i| i.output_names().len())
    }

    /// Number of argument inputs (the rest of `inputs` are auxiliary states).
    pub fn num_arguments(&self) -> usize {
        self.inst.as_ref().map_or(0, |i| i.arguments().len())
    }

    /// The name of output `i` as list_outputs shows it.
    pub fn output_name(&self, i: usize) -> String {
        match &self.inst {
            None => self.name.clone(),
            Some(inst) => {
                let names = inst.output_names();
                format!(
                    "{}_{}",
                    self.name,
                    names
                        .get(i)
                        .cloned()
                        .unwrap_or_else(|| format!("output{i}"))
                )
            }
        }
    }
}

thread_local! {
    /// MXNet's automatic-name counters (its `NameManager`): one per hint, per thread as
    /// MXNet's is, in a stack of scopes — [`with_fresh_names`] pushes an empty one.
    static NAME_SCOPES: RefCell<Vec<HashMap<String, usize>>> = RefCell::new(vec![HashMap::new()]);
}

/// `{hint}{counter}`: the next automatic name for `hint` (MXNet lowercases the called
/// function's name: `FullyConnected` → `fullyconnected0`, `_PlusScalar` → `_plusscalar0`).
pub fn auto_name(hint: &str) -> String {
    NAME_SCOPES.with(|scopes| {
        let mut scopes = scopes.borrow_mut();
        if scopes.is_empty() {
            scopes.push(HashMap::new());
        }
        let top = scopes.len() - 1;
        let c = scopes[top].entry(hint.to_string()).or_insert(0);
        let name = format!("{hint}{c}");
        *c += 1;
        name
    })
}

/// Restarts every automatic-name counter of the current scope at 0.
pub fn reset_auto_names() {
    NAME_SCOPES.with(|scopes| {
        if let Some(top) = scopes.borrow_mut().last_mut() {
            top.clear();
        }
    })
}

/// Starts a fresh automatic-name scope on this thread (counters at 0); [`exit_name_scope`]
/// returns to the enclosing one with its counters as they were. Prefer [`with_fresh_names`].
pub fn enter_name_scope() {
    NAME_SCOPES.with(|scopes| scopes.borrow_mut().push(HashMap::new()))
}

/// Ends the scope [`enter_name_scope`] started (the outermost scope is never removed).
pub fn exit_name_scope() {
    NAME_SCOPES.with(|scopes| {
        let mut scopes = scopes.borrow_mut();
        if scopes.len() > 1 {
            scopes.pop();
        }
    })
}

/// Runs `f` under a fresh automatic-name scope, as MXNet's `with NameManager():` does (how a
/// BucketingModule runs `sym_gen`: an unnamed op gets the same name in every bucket, and the
/// caller's counters are left as they were).
pub fn with_fresh_names<T>(f: impl FnOnce() -> T) -> T {
    struct Exit;
    impl Drop for Exit {
        fn drop(&mut self) {
            exit_name_scope();
        }
    }
    enter_name_scope();
    let _exit = Exit;
    f()
}

impl Symbol {
    /// A variable named `name`.
    pub fn variable(name: &str) -> Symbol {
        Self::variable_with_attrs(name, BTreeMap::new())
    }

    /// A variable with attributes (`__shape__`, `__init__`, `__lr_mult__`, …).
    pub fn variable_with_attrs(name: &str, attrs: BTreeMap<String, String>) -> Symbol {
        let node = Node::new(None, None, name.to_string(), attrs, vec![]);
        Symbol {
            heads: vec![Entry {
                node,
                index: 0,
                version: 0,
            }],
        }
    }

    /// Applies operator `op` (an MXNet name) with string attributes to inputs given by
    /// position (`None`) or argument name. Missing arguments become variables named
    /// `{name}_{arg}` carrying a copy of the op's attributes; an unnamed op gets MXNet's
    /// automatic name (`fullyconnected0`). Variadic ops take every input positionally and
    /// set their count parameter themselves.
    pub fn create(
        op: &str,
        name: Option<&str>,
        attrs: &[(&str, &str)],
        inputs: Vec<(Option<String>, Symbol)>,
    ) -> Result<Symbol> {
        let attrs: BTreeMap<String, String> = attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Self::compose(op, name, attrs, inputs)
    }

    /// `create` with an owned attribute map.
    pub fn compose(
        op: &str,
        name: Option<&str>,
        mut attrs: BTreeMap<String, String>,
        inputs: Vec<(Option<String>, Symbol)>,
    ) -> Result<Symbol> {
        let def = ops::lookup(op)?;
        let name = match name {
            Some(n) => n.to_string(),
            None => auto_name(&def.name.to_lowercase()),
        };
        if let Some(count) = def.variadic {
            if inputs.iter().any(|(k, _)| k.is_some()) {
                return Err(Error::invalid(
                    format!("{op} node \"{name}\": inputs"),
                    "positional inputs only (a variadic operator)",
                    "named inputs",
                ));
            }
            attrs.insert(count.to_string(), inputs.len().to_string());
        }
        let inst = def.instantiate(&name, &attrs)?;
        let arg_names = inst.arguments();
        let aux_names = inst.aux_states();
        let mut slots: Vec<Option<Entry>> = vec![None; arg_names.len() + aux_names.len()];
        let all_names: Vec<&String> = arg_names.iter().chain(aux_names.iter()).collect();
        let mut next_pos = 0;
        for (key, sym) in inputs {
            let entry = sym.single_entry(&format!(
                "{op} node \"{name}\": input {}",
                key.as_deref().unwrap_or("(positional)")
            ))?;
            let slot = match key {
                Some(k) => all_names.iter().position(|n| **n == k).ok_or_else(|| {
                    Error::invalid(
                        format!("{op} node \"{name}\": input \"{k}\""),
                        format!(
                            "one of {}",
                            all_names
                                .iter()
                                .map(|s| s.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                        "an unknown input name",
                    )
                })?,
                None => {
                    while next_pos < slots.len() && slots[next_pos].is_some() {
                        next_pos += 1;
                    }
                    if next_pos >= slots.len() {
                        return Err(Error::invalid(
                            format!("{op} node \"{name}\": inputs"),
                            format!("at most {} inputs", slots.len()),
                            "more",
                        ));
                    }
                    next_pos
                }
            };
            if slots[slot].is_some() {
                return Err(Error::invalid(
                    format!("{op} node \"{name}\": input \"{}\"", all_names[slot]),
                    "one value",
                    "two",
                ));
            }
            slots[slot] = Some(entry);
        }
        let n_args = arg_names.len();
        let mut entries = Vec::with_capacity(slots.len());
        for (i, slot) in slots.into_iter().enumerate() {
            let is_aux = i >= n_args;
            let mut e = match slot {
                Some(e) => e,
                None => {
                    let mut vattrs = attrs.clone();
                    vattrs.retain(|k, _| {
                        !(k.starts_with("__") && k.ends_with("__")) || k == "__ctx_group__"
                    });
                    if is_aux {
                        if let Some(init) = aux_init(all_names[i]) {
                            vattrs.insert("__init__".into(), init.into());
                        }
                    }
                    Symbol::variable_with_attrs(&format!("{name}_{}", all_names[i]), vattrs)
                        .heads
                        .remove(0)
                }
            };
            if is_aux {
                // A mutated input: its entry carries the mutation count (JSON `version`).
                let v = e.node.mutations.fetch_add(1, Ordering::SeqCst) + 1;
                e.version = v;
                if e.node.is_variable() && !e.node.attrs.contains_key("__init__") {
                    if let Some(init) = aux_init(all_names[i]) {
                        // MXNet sets the init attribute on passed-in aux variables too.
                        let mut a = e.node.attrs.clone();
                        a.insert("__init__".into(), init.into());
                        let node = Node::new(None, None, e.node.name.clone(), a, vec![]);
                        node.mutations.store(v, Ordering::SeqCst);
                        e.node = node;
                    }
                }
            }
            entries.push(e);
        }
        let node = Node::new(Some(def), Some(inst), name, attrs, entries);
        let heads = (0..node.num_visible_outputs())
            .map(|i| Entry {
                node: node.clone(),
                index: i,
                version: 0,
            })
            .collect();
        Ok(Symbol { heads })
    }

    fn single_entry(&self, what: &str) -> Result<Entry> {
        if self.heads.len() != 1 {
            return Err(Error::invalid(
                what,
                "a symbol with one output",
                format!("a group of {} outputs", self.heads.len()),
            ));
        }
        Ok(self.heads[0].clone())
    }

    /// Groups several symbols' outputs into one symbol.
    pub fn group(symbols: &[Symbol]) -> Symbol {
        Symbol {
            heads: symbols
                .iter()
                .flat_map(|s| s.heads.iter().cloned())
                .collect(),
        }
    }

    /// Output `i` as a symbol.
    pub fn output(&self, i: usize) -> Result<Symbol> {
        self.heads
            .get(i)
            .map(|e| Symbol {
                heads: vec![e.clone()],
            })
            .ok_or_else(|| {
                Error::invalid(
                    "symbol index",
                    format!("an output index below {}", self.heads.len()),
                    i.to_string(),
                )
            })
    }

    /// The output named `name` (as in `list_outputs`).
    pub fn output_by_name(&self, name: &str) -> Result<Symbol> {
        let outs = self.list_outputs();
        match outs.iter().position(|o| o == name) {
            Some(i) => self.output(i),
            None => Err(Error::invalid(
                "symbol output name",
                format!("one of {}", outs.join(", ")),
                format!("\"{name}\""),
            )),
        }
    }

    /// Every node, in MXNet's order: depth-first post-order from the heads, inputs in order.
    pub fn topo_nodes(&self) -> Vec<Arc<Node>> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        // Iterative DFS: deep graphs must not overflow the stack.
        for head in &self.heads {
            let mut stack: Vec<(Arc<Node>, usize)> = vec![(head.node.clone(), 0)];
            while let Some((node, i)) = stack.pop() {
                let key = Arc::as_ptr(&node) as usize;
                if i == 0 && seen.contains(&key) {
                    continue;
                }
                if i < node.inputs.len() {
                    let child = node.inputs[i].node.clone();
                    stack.push((node, i + 1));
                    if !seen.contains(&(Arc::as_ptr(&child) as usize)) {
                        stack.push((child, 0));
                    }
                } else if seen.insert(key) {
                    out.push(node);
                }
            }
        }
        out
    }

    /// All outputs of every node (variables included), like MXNet's `get_internals`.
    pub fn get_internals(&self) -> Symbol {
        let heads = self
            .topo_nodes()
            .into_iter()
            .flat_map(|n| {
                (0..n.num_visible_outputs()).map(move |i| Entry {
                    node: n.clone(),
                    index: i,
                    version: 0,
                })
            })
            .collect();
        Symbol { heads }
    }

    /// Variables feeding auxiliary-state slots.
    fn aux_variable_ptrs(&self, nodes: &[Arc<Node>]) -> HashSet<usize> {
        let mut aux = HashSet::new();
        for n in nodes {
            let na = n.num_arguments();
            for e in n.inputs.iter().skip(na) {
                aux.insert(Arc::as_ptr(&e.node) as usize);
            }
        }
        aux
    }

    /// Argument names (variables that are not auxiliary states), in graph order.
    pub fn list_arguments(&self) -> Vec<String> {
        let nodes = self.topo_nodes();
        let aux = self.aux_variable_ptrs(&nodes);
        nodes
            .iter()
            .filter(|n| n.is_variable() && !aux.contains(&(Arc::as_ptr(n) as usize)))
            .map(|n| n.name.clone())
            .collect()
    }

    /// Auxiliary state names, in graph order.
    pub fn list_auxiliary_states(&self) -> Vec<String> {
        let nodes = self.topo_nodes();
        let aux = self.aux_variable_ptrs(&nodes);
        nodes
            .iter()
            .filter(|n| n.is_variable() && aux.contains(&(Arc::as_ptr(n) as usize)))
            .map(|n| n.name.clone())
            .collect()
    }

    /// Every variable name (arguments and auxiliary states), in graph order.
    pub fn list_inputs(&self) -> Vec<String> {
        self.topo_nodes()
            .iter()
            .filter(|n| n.is_variable())
            .map(|n| n.name.clone())
            .collect()
    }

    /// Output names (`fc1_output`, or a variable's own name).
    pub fn list_outputs(&self) -> Vec<String> {
        self.heads
            .iter()
            .map(|e| e.node.output_name(e.index))
            .collect()
    }

    /// The name of a single-output symbol's node.
    pub fn name(&self) -> Option<String> {
        if self.heads.len() == 1 {
            Some(self.heads[0].node.name.clone())
        } else {
            None
        }
    }

    /// Attribute `key` of a single-node symbol.
    pub fn attr(&self, key: &str) -> Option<String> {
        if self.heads.len() != 1 {
            return None;
        }
        self.heads[0].node.attrs.get(key).cloned()
    }

    /// Attributes of every node, by node name (nodes without attributes left out).
    pub fn attr_dict(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        self.topo_nodes()
            .iter()
            .filter(|n| !n.attrs.is_empty())
            .map(|n| (n.name.clone(), n.attrs.clone()))
            .collect()
    }
}

/// The `__init__` attribute MXNet gives BatchNorm-style auxiliary states.
fn aux_init(name: &str) -> Option<&'static str> {
    if name.ends_with("moving_mean") || name.ends_with("running_mean") {
        Some("[\"zero\", {}]")
    } else if name.ends_with("moving_var") || name.ends_with("running_var") {
        Some("[\"one\", {}]")
    } else {
        None
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_name_scope_restarts_counters_and_restores_the_callers() {
        let first = auto_name("scopetest");
        let inner: Vec<String> = (0..2)
            .map(|_| with_fresh_names(|| auto_name("scopetest")))
            .collect();
        assert_eq!(inner, ["scopetest0", "scopetest0"]);
        let next = auto_name("scopetest");
        let n = |s: &str| s.trim_start_matches("scopetest").parse::<usize>().unwrap();
        assert_eq!(n(&next), n(&first) + 1);
    }
}
