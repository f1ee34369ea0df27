//! MXNet's symbol JSON (`-symbol.json`, `Symbol.tojson()`): byte-exact writing as MXNet 1.9.1
//! does it, reading, the pre-1.0 layouts MXNet 1.9.1 upgrades on load, and file save / load.
//!
//! ```
//! use mxfn_core::symbol::{json, Symbol};
//! let data = Symbol::variable("data");
//! let fc = Symbol::create("FullyConnected", Some("fc"), &[("num_hidden", "4")], vec![(None, data)]).unwrap();
//! let text = json::to_json(&fc);
//! assert!(text.starts_with("{\n  \"nodes\": [\n    {\n      \"op\": \"null\", \n"));
//! assert_eq!(json::to_json(&json::load_json(&text).unwrap()), text);
//! ```

use super::{aux_init, Entry, Node, Symbol};
use crate::error::{Error, Result, ResultExt};
use crate::ops::{self, OpDef, Operator};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

/// The version `to_json` writes in the graph attributes (MXNet 1.9.1 = 1·10000 + 9·100 + 1).
pub const MXNET_VERSION: i64 = 10901;

/// The version assumed for a file without `attrs.mxnet_version` (MXNet 0.8.0).
const VERSION_0_8_0: i64 = 800;

/// MXNet's reserved attribute keys that pre-1.0 files wrote without the `__…__` wrapping, in
/// MXNet's order (`kHiddenKeys`).
const HIDDEN_KEYS: [&str; 5] = [
    "ctx_group",
    "lr_mult",
    "wd_mult",
    "force_mirroring",
    "mirror_stage",
];

// ------------------------------------------------------------------------------------------
// Writing
// ------------------------------------------------------------------------------------------

/// A writer producing exactly dmlc-core's `JSONWriter` layout: every scope is one-line or
/// multi-line; in a multi-line scope each item starts on a new line indented by 2 spaces per
/// open scope (one-line scopes count too), and items are separated by `", "` written *before*
/// the newline.
struct Writer {
    out: String,
    /// (multi-line, items written so far) per open scope.
    scopes: Vec<(bool, usize)>,
}

impl Writer {
    fn new() -> Self {
        Writer {
            out: String::new(),
            scopes: Vec::new(),
        }
    }

    /// dmlc's `WriteSeperator`: a newline and indentation unless the innermost scope is
    /// one-line (with no scope open it counts as multi-line).
    fn separator(&mut self) {
        if self.scopes.last().is_none_or(|s| s.0) {
            self.out.push('\n');
            for _ in 0..self.scopes.len() * 2 {
                self.out.push(' ');
            }
        }
    }

    /// Starts the next item of the innermost scope.
    fn next_item(&mut self) {
        let first = self.scopes.last().is_none_or(|s| s.1 == 0);
        if !first {
            self.out.push_str(", ");
        }
        self.separator();
        if let Some(s) = self.scopes.last_mut() {
            s.1 += 1;
        }
    }

    fn begin(&mut self, open: char, multi_line: bool) {
        self.out.push(open);
        self.scopes.push((multi_line, 0));
    }

    /// Closes a scope: the closing bracket goes on its own line (at the parent's indentation)
    /// only for a non-empty multi-line scope.
    fn end(&mut self, close: char) {
        let (multi_line, n) = self.scopes.pop().unwrap_or((false, 0));
        if multi_line && n != 0 {
            self.separator();
        }
        self.out.push(close);
    }

    /// An object key: written raw, without escaping (as dmlc does).
    fn key(&mut self, k: &str) {
        self.next_item();
        self.out.push('"');
        self.out.push_str(k);
        self.out.push_str("\": ");
    }

    /// A string value; only `"`, `\`, newline, carriage return and tab are escaped, every
    /// other byte is written raw.
    fn string(&mut self, s: &str) {
        self.out.push('"');
        for c in s.chars() {
            match c {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                '\r' => self.out.push_str("\\r"),
                '\t' => self.out.push_str("\\t"),
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }

    fn number(&mut self, n: impl std::fmt::Display) {
        self.out.push_str(&n.to_string());
    }

    /// An array of numbers: multi-line only with more than 10 elements.
    fn numbers(&mut self, v: &[usize]) {
        self.begin('[', v.len() > 10);
        for n in v {
            self.next_item();
            self.number(n);
        }
        self.end(']');
    }

    /// An array of `[node, index, version]` entries: multi-line only with more than 10
    /// elements; each entry is one line.
    fn entries(&mut self, v: &[[usize; 3]]) {
        self.begin('[', v.len() > 10);
        for e in v {
            self.next_item();
            self.numbers(e);
        }
        self.end(']');
    }

    /// A string → string map: multi-line only with more than one key.
    fn string_map(&mut self, m: &BTreeMap<String, String>) {
        self.begin('{', m.len() > 1);
        for (k, v) in m {
            self.key(k);
            self.string(v);
        }
        self.end('}');
    }
}

/// The JSON text MXNet 1.9.1's `Symbol.tojson()` / `Symbol.save` writes for `sym`, byte for
/// byte: nodes in depth-first post-order from the heads, node attrs sorted, `node_row_ptr`
/// counting hidden outputs, entry versions from [`Entry::version`], the graph attribute
/// `mxnet_version` 10901, no trailing newline.
pub fn to_json(sym: &Symbol) -> String {
    let nodes = sym.topo_nodes();
    let index: HashMap<*const Node, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (Arc::as_ptr(n), i))
        .collect();
    // Every input of a node in `topo_nodes` is itself in it, so the lookup cannot miss.
    let entry = |e: &Entry| {
        [
            index.get(&Arc::as_ptr(&e.node)).copied().unwrap_or(0),
            e.index,
            e.version as usize,
        ]
    };
    let mut w = Writer::new();
    w.begin('{', true);
    w.key("nodes");
    w.begin('[', true);
    for n in &nodes {
        w.next_item();
        w.begin('{', true);
        w.key("op");
        w.string(n.op_name());
        w.key("name");
        w.string(&n.name);
        if !n.attrs.is_empty() {
            w.key("attrs");
            w.string_map(&n.attrs);
        }
        w.key("inputs");
        w.entries(&n.inputs.iter().map(entry).collect::<Vec<_>>());
        w.end('}');
    }
    w.end(']');
    let arg_nodes: Vec<usize> = (0..nodes.len())
        .filter(|&i| nodes[i].is_variable())
        .collect();
    w.key("arg_nodes");
    w.numbers(&arg_nodes);
    let mut row_ptr = Vec::with_capacity(nodes.len() + 1);
    row_ptr.push(0);
    for n in &nodes {
        row_ptr.push(row_ptr[row_ptr.len() - 1] + n.num_graph_outputs());
    }
    w.key("node_row_ptr");
    w.numbers(&row_ptr);
    w.key("heads");
    w.entries(&sym.heads.iter().map(entry).collect::<Vec<_>>());
    w.key("attrs");
    w.begin('{', false);
    w.key("mxnet_version");
    w.begin('[', false);
    w.next_item();
    w.string("int");
    w.next_item();
    w.number(MXNET_VERSION);
    w.end(']');
    w.end('}');
    w.end('}');
    w.out
}

/// Writes `to_json(sym)` to `path` atomically, through [`crate::atomic_file::write`].
pub fn save(sym: &Symbol, path: impl AsRef<Path>) -> Result<()> {
    crate::atomic_file::write(path.as_ref(), to_json(sym).as_bytes())
}

/// Reads a symbol JSON file (modern or pre-1.0 layout); format errors name the file.
pub fn load(path: impl AsRef<Path>) -> Result<Symbol> {
    let path = path.as_ref();
    let shown = path.display().to_string();
    let text = String::from_utf8(crate::limits::read_file(path)?)
        .map_err(|e| Error::format(&shown, format!("not UTF-8 text: {e}")))?;
    parse(&text, &shown)
}

// ------------------------------------------------------------------------------------------
// Reading
// ------------------------------------------------------------------------------------------

/// Parses MXNet symbol JSON into a symbol, upgrading pre-1.0 layouts as MXNet 1.9.1 does
/// (FORMAT.md §2.3), by the file's `mxnet_version` (missing: 0.8.0):
///
/// 1. below 1.9.1: `lr_mult`, `wd_mult`, `ctx_group`, `force_mirroring`, `mirror_stage`
///    become `__lr_mult__` etc.; `<input>_lr_mult` on an operator moves to the variable
///    feeding that input as `__lr_mult__`;
/// 2. operator parameters are parsed and checked;
/// 3. below 0.9.0: missing inputs (BatchNorm's aux states) become variables
///    `<node>_<input>` carrying a copy of the operator's attrs, with entry version 0;
/// 4. below 0.9.4: BatchNorm-style moving_mean / moving_var variables get their `__init__`;
/// 5. below 0.9.5: `argmax` / `argmin` with `axis` `"-1"` lose the axis.
///
/// Errors are [`Error::Format`] naming the node (index and name) and the problem; an unknown
/// operator or a bad parameter keeps its own error, with the node added as context.
pub fn load_json(text: &str) -> Result<Symbol> {
    parse(text, "symbol JSON")
}

/// One `[node, index, version]` entry as read.
#[derive(Clone, Copy)]
struct RawEntry {
    node: usize,
    index: usize,
    version: u32,
}

/// One node as read, before its `Arc<Node>` is built (upgrades rewrite earlier variables'
/// attrs, which must happen before anything references them).
struct RawNode {
    def: Option<&'static OpDef>,
    name: String,
    attrs: BTreeMap<String, String>,
    inputs: Vec<RawEntry>,
    inst: Option<Arc<dyn Operator>>,
}

/// Control characters are written raw by MXNet (only `\n`, `\r`, `\t` are escaped) but a
/// strict parser rejects them inside strings: escape them there as `\u00XX`.
fn escape_raw_controls(text: &str) -> Cow<'_, str> {
    let mut in_string = false;
    let mut escaped = false;
    let mut out: Option<String> = None;
    for (i, c) in text.char_indices() {
        let mut replace = false;
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            } else if (c as u32) < 0x20 {
                replace = true;
            }
        } else if c == '"' {
            in_string = true;
        }
        match (&mut out, replace) {
            (None, false) => {}
            (None, true) => {
                let mut s = String::with_capacity(text.len() + 16);
                s.push_str(&text[..i]);
                s.push_str(&format!("\\u{:04x}", c as u32));
                out = Some(s);
            }
            (Some(s), true) => s.push_str(&format!("\\u{:04x}", c as u32)),
            (Some(s), false) => s.push(c),
        }
    }
    match out {
        Some(s) => Cow::Owned(s),
        None => Cow::Borrowed(text),
    }
}

/// A node attribute map (`attrs`, `attr` or `param`): values are strings (numbers and
/// booleans are taken as their text).
fn attr_map(v: &Value, what: impl Fn() -> String) -> Result<BTreeMap<String, String>> {
    let o = v
        .as_object()
        .ok_or_else(|| Error::Msg(format!("{}: not an object", what())))?;
    let mut m = BTreeMap::new();
    for (k, v) in o {
        let s = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            _ => {
                return Err(Error::Msg(format!(
                    "{}: the value of \"{k}\" is not a string",
                    what()
                )))
            }
        };
        m.insert(k.clone(), s);
    }
    Ok(m)
}

/// The file's version: `attrs.mxnet_version` as `["int", N]` (or a bare N); 800 when absent.
fn file_version(root: &Value, bad: &impl Fn(String) -> Error) -> Result<i64> {
    let Some(v) = root.get("attrs").and_then(|a| a.get("mxnet_version")) else {
        return Ok(VERSION_0_8_0);
    };
    let n = match v {
        Value::Array(a) => a.get(1).and_then(Value::as_i64),
        other => other.as_i64(),
    };
    n.ok_or_else(|| {
        bad(format!(
            "attrs.mxnet_version is {v}, expected [\"int\", <version>]"
        ))
    })
}

/// Reads one entry `[node, index]` or `[node, index, version]`.
fn read_entry(e: &Value, what: &dyn Fn() -> String) -> Result<RawEntry> {
    let err = || Error::Msg(format!("{}: {e} is not [node, index, version]", what()));
    let parts = e.as_array().ok_or_else(err)?;
    if !(2..=3).contains(&parts.len()) {
        return Err(err());
    }
    let num = |i: usize| -> Result<u64> {
        match parts.get(i) {
            None => Ok(0),
            Some(v) => v.as_u64().ok_or_else(err),
        }
    };
    let node = usize::try_from(num(0)?).map_err(|_| err())?;
    let index = usize::try_from(num(1)?).map_err(|_| err())?;
    let version = u32::try_from(num(2)?).map_err(|_| err())?;
    Ok(RawEntry {
        node,
        index,
        version,
    })
}

/// Upgrade step 1 on one node: splits off the keys that look like pre-1.0 reserved keys
/// (exactly a reserved key, or ending with one). Returns (remaining attrs, split-off keys).
fn split_hidden_keys(
    attrs: BTreeMap<String, String>,
) -> (BTreeMap<String, String>, Vec<(String, String)>) {
    let mut kept = BTreeMap::new();
    let mut hidden = Vec::new();
    for (k, v) in attrs {
        // MXNet tests `rfind(key) == 0 || rfind(key) == len - key.len()`.
        let is_hidden = HIDDEN_KEYS.iter().any(|key| match k.rfind(key) {
            Some(0) => true,
            Some(p) => p + key.len() == k.len(),
            None => false,
        });
        if is_hidden {
            hidden.push((k, v));
        } else {
            kept.insert(k, v);
        }
    }
    (kept, hidden)
}

/// Where a split-off reserved key goes (upgrade step 1).
enum HiddenKeyTarget {
    /// Stays on the node under this key (renamed `__x__`, or unchanged).
    Own(String),
    /// Moves as `__x__` to the variable that is raw node `.0`.
    Variable(usize, String),
}

/// Decides, as MXNet's `UpgradeJSON_FixParsing` does, where a split-off key goes: exactly a
/// reserved key → `__key__` on the node; `<input>_<key>` on an operator whose input `<input>`
/// is fed by a variable → `__key__` on that variable; anything else stays as it is.
fn hidden_key_target(
    k: &str,
    input_names: Option<&[String]>,
    inputs: &[RawEntry],
    is_variable: &dyn Fn(usize) -> bool,
) -> HiddenKeyTarget {
    for key in HIDDEN_KEYS {
        let Some(p) = k.rfind(key) else { continue };
        if p == 0 && key.len() == k.len() {
            return HiddenKeyTarget::Own(format!("__{key}__"));
        }
        if p > 1 && p + key.len() == k.len() {
            let Some(names) = input_names else { break };
            let Some(arg) = k.get(..p - 1) else { break };
            if let Some(e) = names
                .iter()
                .position(|n| n == arg)
                .and_then(|i| inputs.get(i))
            {
                if is_variable(e.node) {
                    return HiddenKeyTarget::Variable(e.node, format!("__{key}__"));
                }
            }
            break;
        }
    }
    HiddenKeyTarget::Own(k.to_string())
}

fn parse(text: &str, source: &str) -> Result<Symbol> {
    let bad = |msg: String| Error::format(source, msg);
    let text = escape_raw_controls(text);
    let root: Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
    if !root.is_object() {
        return Err(bad("the top level is not an object".into()));
    }
    let version = file_version(&root, &bad)?;
    let nodes_v = root
        .get("nodes")
        .ok_or_else(|| bad("no \"nodes\" list".into()))?
        .as_array()
        .ok_or_else(|| bad("\"nodes\" is not a list".into()))?;

    // Pass 1: read every node.
    let mut raw: Vec<RawNode> = Vec::with_capacity(nodes_v.len());
    for (i, nv) in nodes_v.iter().enumerate() {
        let o = nv
            .as_object()
            .ok_or_else(|| bad(format!("node {i}: not an object")))?;
        let op = match o.get("op") {
            Some(Value::String(s)) => s.as_str(),
            Some(_) => return Err(bad(format!("node {i}: \"op\" is not a string"))),
            None => return Err(bad(format!("node {i}: no \"op\""))),
        };
        let name = match o.get("name") {
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(bad(format!("node {i}: \"name\" is not a string"))),
            None => return Err(bad(format!("node {i}: no \"name\""))),
        };
        let at = |what: &str| format!("node {i} ({name}): {what}");
        // `attr` and `attrs` fill one map (the later key in the node wins); `param` (MXNet
        // 0.8's operator parameters) adds keys without overriding.
        let mut attrs = BTreeMap::new();
        for (k, v) in o {
            if k == "attr" || k == "attrs" {
                attrs = attr_map(v, || at(&format!("\"{k}\""))).map_err(|e| bad(e.to_string()))?;
            }
        }
        if let Some(p) = o.get("param") {
            for (k, v) in attr_map(p, || at("\"param\"")).map_err(|e| bad(e.to_string()))? {
                attrs.entry(k).or_insert(v);
            }
        }
        let inputs_v = o
            .get("inputs")
            .ok_or_else(|| bad(at("no \"inputs\" list")))?
            .as_array()
            .ok_or_else(|| bad(at("\"inputs\" is not a list")))?;
        let mut inputs = Vec::with_capacity(inputs_v.len());
        for (k, e) in inputs_v.iter().enumerate() {
            let e = read_entry(e, &|| at(&format!("input {k}"))).map_err(|e| bad(e.to_string()))?;
            if e.node >= i {
                return Err(bad(at(&format!(
                    "input {k} refers to node {}, which does not come before it",
                    e.node
                ))));
            }
            inputs.push(e);
        }
        let def = if op == "null" {
            if !inputs.is_empty() {
                return Err(bad(at("a variable (op \"null\") with inputs")));
            }
            None
        } else {
            Some(ops::lookup(op).context(format!("{source}: node {i} ({name})"))?)
        };
        raw.push(RawNode {
            def,
            name,
            attrs,
            inputs,
            inst: None,
        });
    }

    // Pass 2: the upgrade steps that rewrite attributes, and parameter parsing. Every rewrite
    // of another node targets an earlier variable (inputs come first), so doing them in file
    // order before any node is built is equivalent to MXNet's passes over the whole graph.
    for i in 0..raw.len() {
        let name = raw[i].name.clone();
        let ctx = format!("{source}: node {i} ({name})");
        let at = |what: String| bad(format!("node {i} ({name}): {what}"));
        let mut moves: Vec<(usize, String, String)> = Vec::new();
        if version < MXNET_VERSION {
            let attrs = std::mem::take(&mut raw[i].attrs);
            let (mut kept, hidden) = split_hidden_keys(attrs);
            if !hidden.is_empty() {
                // MXNet lists the op's inputs from the attrs without the split-off keys.
                let names: Option<Vec<String>> = match raw[i].def {
                    Some(def) => {
                        let inst = def.instantiate(&name, &kept).context(&ctx)?;
                        Some(
                            inst.arguments()
                                .into_iter()
                                .chain(inst.aux_states())
                                .collect(),
                        )
                    }
                    None => None,
                };
                for (k, v) in hidden {
                    let is_var = |j: usize| raw.get(j).is_some_and(|n| n.def.is_none());
                    match hidden_key_target(&k, names.as_deref(), &raw[i].inputs, &is_var) {
                        HiddenKeyTarget::Own(key) => {
                            kept.insert(key, v);
                        }
                        HiddenKeyTarget::Variable(j, key) => moves.push((j, key, v)),
                    }
                }
            }
            raw[i].attrs = kept;
        }
        if let Some(def) = raw[i].def {
            if version < 905
                && (def.name == "argmax" || def.name == "argmin")
                && raw[i].attrs.get("axis").map(String::as_str) == Some("-1")
            {
                // MXNet 0.9.5 made `axis` optional; an old -1 meant "over everything".
                raw[i].attrs.remove("axis");
            }
            let inst = def.instantiate(&name, &raw[i].attrs).context(&ctx)?;
            let n_args = inst.arguments().len();
            let aux_names = inst.aux_states();
            let want = n_args + aux_names.len();
            let got = raw[i].inputs.len();
            if got > want || (got < want && version >= 900) {
                return Err(at(format!(
                    "{} takes {want} inputs, the file gives {got}",
                    def.name
                )));
            }
            if version < 904 {
                // MXNet 0.9.4 moved initialisers into attributes set at composition.
                for (k, e) in raw[i].inputs.iter().enumerate().skip(n_args) {
                    let target = &raw[e.node];
                    if target.def.is_none() && !target.attrs.contains_key("__init__") {
                        if let Some(init) = aux_names.get(k - n_args).and_then(|a| aux_init(a)) {
                            moves.push((e.node, "__init__".into(), init.into()));
                        }
                    }
                }
            }
            raw[i].inst = Some(inst);
        }
        for (j, key, v) in moves {
            if let Some(n) = raw.get_mut(j) {
                n.attrs.insert(key, v);
            }
        }
    }

    // Pass 3: build the nodes in file order.
    let mut nodes: Vec<Arc<Node>> = Vec::with_capacity(raw.len());
    for (i, r) in raw.into_iter().enumerate() {
        let at = |what: String| bad(format!("node {i} ({}): {what}", r.name));
        let mut inputs = Vec::with_capacity(r.inputs.len());
        for (k, e) in r.inputs.iter().enumerate() {
            let node = nodes
                .get(e.node)
                .cloned()
                .ok_or_else(|| at(format!("input {k} refers to missing node {}", e.node)))?;
            if e.index >= node.num_outputs() {
                return Err(at(format!(
                    "input {k} refers to output {} of node {} ({}), which has {}",
                    e.index,
                    e.node,
                    node.name,
                    node.num_outputs()
                )));
            }
            inputs.push(Entry {
                node,
                index: e.index,
                version: e.version,
            });
        }
        let node = match (r.def, r.inst) {
            (Some(def), Some(inst)) => {
                let n_args = inst.arguments().len();
                let names: Vec<String> = inst
                    .arguments()
                    .into_iter()
                    .chain(inst.aux_states())
                    .collect();
                // Before 0.9.0 aux states were not stored: add them as new variables
                // `<node>_<input>` with a copy of the op's attrs and entry version 0. A
                // variadic operator's inputs are data, never missing parameters: fewer than
                // its count is an error (creating them would let a small file make
                // num_args variables, each with a copy of the attributes).
                if def.variadic.is_some() && inputs.len() < n_args {
                    return Err(at(format!(
                        "{} inputs where the operator takes {n_args}",
                        inputs.len()
                    )));
                }
                for (k, input_name) in names.iter().enumerate().skip(inputs.len()) {
                    let mut attrs = r.attrs.clone();
                    if version < 904 && k >= n_args && !attrs.contains_key("__init__") {
                        if let Some(init) = aux_init(input_name) {
                            attrs.insert("__init__".into(), init.into());
                        }
                    }
                    let var = Node::new(
                        None,
                        None,
                        format!("{}_{input_name}", r.name),
                        attrs,
                        vec![],
                    );
                    inputs.push(Entry {
                        node: var,
                        index: 0,
                        version: 0,
                    });
                }
                Node::new(Some(def), Some(inst), r.name, r.attrs, inputs)
            }
            _ => Node::new(None, None, r.name, r.attrs, inputs),
        };
        nodes.push(node);
    }

    let heads_v = root
        .get("heads")
        .ok_or_else(|| bad("no \"heads\" list".into()))?
        .as_array()
        .ok_or_else(|| bad("\"heads\" is not a list".into()))?;
    let mut heads = Vec::with_capacity(heads_v.len());
    for (k, h) in heads_v.iter().enumerate() {
        let e = read_entry(h, &|| format!("head {k}")).map_err(|e| bad(e.to_string()))?;
        let node = nodes.get(e.node).cloned().ok_or_else(|| {
            bad(format!(
                "head {k} refers to node {}, but there are {} nodes",
                e.node,
                nodes.len()
            ))
        })?;
        if e.index >= node.num_outputs() {
            return Err(bad(format!(
                "head {k} refers to output {} of node {} ({}), which has {}",
                e.index,
                e.node,
                node.name,
                node.num_outputs()
            )));
        }
        heads.push(Entry {
            node,
            index: e.index,
            version: e.version,
        });
    }
    Ok(Symbol { heads })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn var(name: &str, attrs: &[(&str, &str)]) -> Symbol {
        Symbol::variable_with_attrs(
            name,
            attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn single_variable_layout() {
        let text = to_json(&var("x", &[]));
        assert_eq!(
            text,
            "{\n  \"nodes\": [\n    {\n      \"op\": \"null\", \n      \"name\": \"x\", \n      \
             \"inputs\": []\n    }\n  ], \n  \"arg_nodes\": [0], \n  \"node_row_ptr\": [0, 1], \n  \
             \"heads\": [[0, 0, 0]], \n  \"attrs\": {\"mxnet_version\": [\"int\", 10901]}\n}"
        );
    }

    #[test]
    fn attrs_one_line_with_one_key_multi_line_with_two() {
        let one = to_json(&var("x", &[("a", "1")]));
        assert!(
            one.contains("\n      \"attrs\": {\"a\": \"1\"}, \n"),
            "{one}"
        );
        let two = to_json(&var("x", &[("b", "2"), ("a", "1")]));
        assert!(
            two.contains(
                "\n      \"attrs\": {\n        \"a\": \"1\", \n        \"b\": \"2\"\n      }, \n"
            ),
            "{two}"
        );
    }

    #[test]
    fn arrays_one_line_up_to_ten_elements() {
        let mut w = Writer::new();
        w.begin('{', true);
        w.key("ten");
        w.numbers(&(0..10).collect::<Vec<_>>());
        w.key("eleven");
        w.numbers(&(0..11).collect::<Vec<_>>());
        w.key("e");
        w.entries(&[[1, 0, 0], [2, 1, 1]]);
        w.key("empty");
        w.numbers(&[]);
        w.end('}');
        let want_eleven: String = (0..11)
            .map(|i| format!("\n    {i}"))
            .collect::<Vec<_>>()
            .join(", ");
        assert_eq!(
            w.out,
            format!(
                "{{\n  \"ten\": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], \n  \"eleven\": [{want_eleven}\n  \
                 ], \n  \"e\": [[1, 0, 0], [2, 1, 1]], \n  \"empty\": []\n}}"
            )
        );
    }

    #[test]
    fn many_entries_are_multi_line_each_entry_one_line() {
        let mut w = Writer::new();
        w.begin('{', true);
        w.key("heads");
        let v: Vec<[usize; 3]> = (0..11).map(|i| [i, 0, 0]).collect();
        w.entries(&v);
        w.end('}');
        assert!(w
            .out
            .starts_with("{\n  \"heads\": [\n    [0, 0, 0], \n    [1, 0, 0], \n"));
        assert!(w.out.ends_with("\n    [10, 0, 0]\n  ]\n}"));
    }

    #[test]
    fn escaping_only_quote_backslash_newline_cr_tab() {
        let mut w = Writer::new();
        w.string("a\"b\\c\nd\re\tf\u{1}g/é");
        assert_eq!(w.out, "\"a\\\"b\\\\c\\nd\\re\\tf\u{1}g/é\"");
        // Keys are written raw.
        let text = to_json(&var("x", &[("k\"ey", "v")]));
        assert!(text.contains("{\"k\"ey\": \"v\"}"));
    }

    #[test]
    fn raw_control_characters_read_back() {
        let s = var("x\u{1}y", &[("a", "tab\there\u{7f}\u{2}")]);
        let text = to_json(&s);
        let back = load_json(&text).unwrap();
        assert_eq!(back.list_arguments(), vec!["x\u{1}y"]);
        assert_eq!(to_json(&back), text);
    }

    #[test]
    fn operator_graph_round_trips() {
        let data = Symbol::variable("data");
        let fc = Symbol::create(
            "FullyConnected",
            Some("fc1"),
            &[("num_hidden", "3")],
            vec![(None, data)],
        )
        .unwrap();
        let act = Symbol::create(
            "Activation",
            Some("relu1"),
            &[("act_type", "relu")],
            vec![(None, fc)],
        )
        .unwrap();
        let text = to_json(&act);
        assert!(text.contains("\"inputs\": [[0, 0, 0], [1, 0, 0], [2, 0, 0]]"));
        assert!(text.contains("\"node_row_ptr\": [0, 1, 2, 3, 4, 5]"));
        assert!(text.contains("\"arg_nodes\": [0, 1, 2]"));
        assert_eq!(to_json(&load_json(&text).unwrap()), text);
    }

    #[test]
    fn legacy_reserved_keys_renamed_and_moved() {
        let text = r#"{"nodes": [
            {"op": "null", "name": "data", "inputs": [], "attr": {"ctx_group": "g"}},
            {"op": "null", "name": "w", "inputs": [], "attr": {"weight_lr_mult": "3"}},
            {"op": "null", "name": "b", "inputs": []},
            {"op": "FullyConnected", "name": "fc", "param": {"num_hidden": "2"},
             "attr": {"bias_wd_mult": "0", "lr_mult": "5"}, "inputs": [[0, 0], [1, 0], [2, 0]]}
        ], "heads": [[3, 0]]}"#;
        let s = load_json(text).unwrap();
        let d = s.attr_dict();
        assert_eq!(d["data"]["__ctx_group__"], "g");
        // A suffixed key on a variable stays as it is.
        assert_eq!(d["w"]["weight_lr_mult"], "3");
        assert_eq!(d["b"]["__wd_mult__"], "0");
        assert_eq!(d["fc"]["__lr_mult__"], "5");
        assert!(!d["fc"].contains_key("bias_wd_mult"));
        assert_eq!(d["fc"]["num_hidden"], "2");
    }

    #[test]
    fn missing_inputs_appended_only_before_0_9() {
        let nodes = r#"[{"op": "null", "name": "data", "inputs": []},
            {"op": "FullyConnected", "name": "fc", "param": {"num_hidden": "2"},
             "attr": {"__ctx_group__": "g"}, "inputs": [[0, 0]]}]"#;
        let old = load_json(&format!(r#"{{"nodes": {nodes}, "heads": [[1, 0]]}}"#)).unwrap();
        assert_eq!(old.list_arguments(), vec!["data", "fc_weight", "fc_bias"]);
        let text = to_json(&old);
        assert!(text.contains("\"inputs\": [[0, 0, 0], [1, 0, 0], [2, 0, 0]]"));
        // The new variables carry a copy of the operator's attrs (reserved keys included).
        assert_eq!(
            old.attr_dict()["fc_bias"],
            old.attr_dict()["fc"],
            "{:?}",
            old.attr_dict()
        );
        let e = load_json(&format!(
            r#"{{"nodes": {nodes}, "heads": [[1, 0]], "attrs": {{"mxnet_version": ["int", 900]}}}}"#
        ))
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("node 1 (fc): FullyConnected takes 3 inputs, the file gives 1"),
            "{e}"
        );
    }

    #[test]
    fn argmax_axis_minus_one_dropped_before_0_9_5() {
        if ops::lookup("argmax").is_err() {
            return; // the reduce family is not registered in this build
        }
        let text = |axis: &str, version: i64| {
            format!(
                r#"{{"nodes": [{{"op": "null", "name": "x", "inputs": []}},
                {{"op": "argmax", "name": "p", "attrs": {{"axis": "{axis}"}}, "inputs": [[0, 0, 0]]}}],
                "heads": [[1, 0, 0]], "attrs": {{"mxnet_version": ["int", {version}]}}}}"#
            )
        };
        let axis = |t: String| {
            load_json(&t)
                .unwrap()
                .attr_dict()
                .get("p")
                .and_then(|a| a.get("axis").cloned())
        };
        assert_eq!(axis(text("-1", 904)), None);
        assert_eq!(axis(text("-1", 905)), Some("-1".into()));
        assert_eq!(axis(text("1", 904)), Some("1".into()));
    }

    #[test]
    fn version_1_9_1_keeps_plain_reserved_keys() {
        let text = r#"{"nodes": [{"op": "null", "name": "x", "attrs": {"lr_mult": "2"}, "inputs": []}],
            "heads": [[0, 0, 0]], "attrs": {"mxnet_version": ["int", 10901]}}"#;
        let s = load_json(text).unwrap();
        assert_eq!(s.attr_dict()["x"]["lr_mult"], "2");
    }

    #[test]
    fn errors_name_the_problem() {
        for (text, want) in [
            ("{", "not valid JSON"),
            ("[]", "top level"),
            ("{\"heads\": []}", "no \"nodes\""),
            ("{\"nodes\": []}", "no \"heads\""),
            (
                r#"{"nodes": [{"name": "x", "inputs": []}], "heads": []}"#,
                "node 0: no \"op\"",
            ),
            (
                r#"{"nodes": [{"op": "null", "inputs": []}], "heads": []}"#,
                "node 0: no \"name\"",
            ),
            (
                r#"{"nodes": [{"op": "null", "name": "x"}], "heads": []}"#,
                "node 0 (x): no \"inputs\"",
            ),
            (
                r#"{"nodes": [{"op": "Activation", "name": "a", "attrs": {"act_type": "relu"}, "inputs": [[1, 0, 0]]},
                   {"op": "null", "name": "x", "inputs": []}], "heads": [[0, 0, 0]]}"#,
                "does not come before it",
            ),
            (
                r#"{"nodes": [{"op": "NoSuchOp", "name": "n", "inputs": []}], "heads": [[0, 0, 0]]}"#,
                "node 0 (n): unknown operator \"NoSuchOp\"",
            ),
            (
                r#"{"nodes": [{"op": "null", "name": "x", "inputs": []}], "heads": [[3, 0, 0]]}"#,
                "head 0 refers to node 3",
            ),
            (
                r#"{"nodes": [{"op": "null", "name": "x", "inputs": []}], "heads": [[0, 1, 0]]}"#,
                "head 0 refers to output 1",
            ),
            (
                r#"{"nodes": [{"op": "null", "name": "x", "inputs": []}], "heads": [["a"]]}"#,
                "head 0",
            ),
            (
                r#"{"nodes": [{"op": "null", "name": "x", "inputs": [], "attrs": {"a": [1]}}], "heads": []}"#,
                "node 0 (x): \"attrs\": the value of \"a\" is not a string",
            ),
            (
                r#"{"nodes": [{"op": "null", "name": "x", "inputs": []},
                   {"op": "Activation", "name": "a", "attrs": {"act_type": "relu"}, "inputs": [[0, 0, 0], [0, 0, 0]]}],
                   "heads": [[1, 0, 0]], "attrs": {"mxnet_version": ["int", 10901]}}"#,
                "node 1 (a): Activation takes 1 inputs, the file gives 2",
            ),
        ] {
            let e = load_json(text)
                .err()
                .unwrap_or_else(|| panic!("{text} loaded"));
            assert!(e.to_string().contains(want), "{e} does not contain {want}");
        }
    }
}
