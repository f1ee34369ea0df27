//! Mutations: byte-level ones for every reader, number rewrites for the text formats, and
//! structural ones on the parsed JSON of a symbol file.

use super::rng::Rng;
use serde_json::{Map, Value};

/// Mutated inputs are cut to this size (large enough for a 1000-node chain of symbol JSON).
pub const MAX_INPUT: usize = 256 * 1024;

const BYTES: [u8; 14] = [
    0, 1, 0x7f, 0x80, 0xff, 0xfe, 0x20, b'\n', b'"', b',', b'0', b'9', b'-', b'(',
];
const U32S: [u32; 14] = [
    0,
    1,
    2,
    0xff,
    0xffff,
    0x1_0000,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_fffe,
    0xffff_ffff,
    2049,            // IDX labels magic
    2051,            // IDX images magic
    0xF993_FAC9,     // .params V2 record magic
    0x1000_0000 + 1, // an odd huge count
];
const U64S: [u64; 12] = [
    0,
    1,
    1 << 31,
    (1 << 32) - 1,
    1 << 32,
    1 << 40,
    1 << 61,
    1 << 62,
    1 << 63,
    i64::MAX as u64,
    u64::MAX,
    0x112, // .params file magic
];
/// Numbers written over the digits of a text input.
const NUMBERS: [&str; 22] = [
    "0",
    "1",
    "-1",
    "-0",
    "2",
    "255",
    "65536",
    "2147483648",
    "4294967295",
    "4294967296",
    "100000000",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "1e308",
    "1e999",
    "-1e-320",
    "0.5",
    "NaN",
    "inf",
    "00000000000000000000000001",
];

/// Applies 1 to 4 byte-level mutations of `base` (the other corpus entries feed splicing).
pub fn bytes(rng: &mut Rng, base: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut v = base.to_vec();
    let n = 1 + rng.below(4).min(rng.below(4));
    for _ in 0..n {
        one(rng, &mut v, corpus);
    }
    v.truncate(MAX_INPUT);
    v
}

/// A position in `0..=len` (an insertion point), preferring 4-byte alignment half the time.
fn pos(rng: &mut Rng, len: usize) -> usize {
    let p = rng.below(len + 1);
    if rng.chance(1, 2) {
        p & !3
    } else {
        p
    }
}

/// A chunk length: mostly short, sometimes long.
fn chunk_len(rng: &mut Rng, max: usize) -> usize {
    let n = match rng.below(4) {
        0 => 1,
        1 => 1 + rng.below(8),
        2 => 1 + rng.below(64),
        _ => 1 + rng.below(max.max(1)),
    };
    n.min(max)
}

fn write_at(v: &mut Vec<u8>, at: usize, bytes: &[u8]) {
    if v.len() < at + bytes.len() {
        v.resize(at + bytes.len(), 0);
    }
    v[at..at + bytes.len()].copy_from_slice(bytes);
}

fn one(rng: &mut Rng, v: &mut Vec<u8>, corpus: &[Vec<u8>]) {
    let len = v.len();
    match rng.below(12) {
        // bit flip
        0 if len > 0 => {
            let i = rng.below(len);
            v[i] ^= 1 << rng.below(8);
        }
        // a byte set to an interesting value
        1 if len > 0 => {
            let i = rng.below(len);
            v[i] = *rng.pick(&BYTES);
        }
        // an interesting u32 (LE or BE, IDX is big-endian)
        2 | 3 => {
            let x = *rng.pick(&U32S);
            let b = if rng.chance(1, 3) {
                x.to_be_bytes()
            } else {
                x.to_le_bytes()
            };
            let at = pos(rng, len.saturating_sub(4));
            write_at(v, at, &b);
        }
        // an interesting u64
        4 => {
            let x = *rng.pick(&U64S);
            let b = if rng.chance(1, 4) {
                x.to_be_bytes()
            } else {
                x.to_le_bytes()
            };
            let at = pos(rng, len.saturating_sub(8));
            write_at(v, at, &b);
        }
        // truncation
        5 if len > 0 => v.truncate(rng.below(len)),
        // chunk deletion
        6 if len > 0 => {
            let at = rng.below(len);
            let n = chunk_len(rng, len - at);
            v.drain(at..at + n);
        }
        // chunk duplication (a copy inserted elsewhere, sometimes many times)
        7 if len > 0 => {
            let at = rng.below(len);
            let n = chunk_len(rng, len - at);
            let chunk = v[at..at + n].to_vec();
            let times = if rng.chance(1, 4) {
                1 + rng.below(64)
            } else {
                1
            };
            let to = rng.below(len + 1);
            let ins: Vec<u8> = chunk.iter().copied().cycle().take(n * times).collect();
            v.splice(to..to, ins);
        }
        // random bytes or a run of one byte inserted
        8 => {
            let n = chunk_len(rng, 256);
            let run = rng.chance(1, 2);
            let b = rng.byte();
            let ins: Vec<u8> = (0..n).map(|_| if run { b } else { rng.byte() }).collect();
            let to = rng.below(len + 1);
            v.splice(to..to, ins);
        }
        // splice: a prefix of this input, a suffix of another
        9 if !corpus.is_empty() => {
            let other = rng.pick(corpus);
            let cut = rng.below(len + 1);
            let from = rng.below(other.len() + 1);
            v.truncate(cut);
            v.extend_from_slice(&other[from..]);
        }
        // small arithmetic on a byte or a little-endian u32
        10 if len > 0 => {
            let delta = 1 + rng.below(35) as u32;
            if rng.chance(1, 2) || len < 4 {
                let i = rng.below(len);
                v[i] = if rng.chance(1, 2) {
                    v[i].wrapping_add(delta as u8)
                } else {
                    v[i].wrapping_sub(delta as u8)
                };
            } else {
                let at = rng.below(len - 3);
                let mut w = [0u8; 4];
                w.copy_from_slice(&v[at..at + 4]);
                let x = u32::from_le_bytes(w);
                let y = if rng.chance(1, 2) {
                    x.wrapping_add(delta)
                } else {
                    x.wrapping_sub(delta)
                };
                v[at..at + 4].copy_from_slice(&y.to_le_bytes());
            }
        }
        // a chunk copied over another place of the same input
        11 if len > 1 => {
            let from = rng.below(len);
            let n = chunk_len(rng, len - from);
            let to = rng.below(len);
            let chunk = v[from..from + n].to_vec();
            write_at(v, to, &chunk);
        }
        _ => {
            // the guard failed (empty input): append something
            let b = *rng.pick(&BYTES);
            v.push(b);
        }
    }
}

/// Rewrites one run of ASCII digits (with its sign) of a text input as an interesting number.
pub fn text_number(rng: &mut Rng, base: &[u8]) -> Vec<u8> {
    let runs: Vec<(usize, usize)> = digit_runs(base);
    let mut v = base.to_vec();
    if runs.is_empty() {
        let at = rng.below(v.len() + 1);
        v.splice(at..at, rng.pick(&NUMBERS).bytes());
        return v;
    }
    let (s, e) = *rng.pick(&runs);
    v.splice(s..e, rng.pick(&NUMBERS).bytes());
    v.truncate(MAX_INPUT);
    v
}

fn digit_runs(b: &[u8]) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let s = if i > 0 && b[i - 1] == b'-' { i - 1 } else { i };
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
                i += 1;
            }
            runs.push((s, i));
        } else {
            i += 1;
        }
    }
    runs
}

// ---------------------------------------------------------------------------------------------
// Symbol JSON: structural mutations
// ---------------------------------------------------------------------------------------------

/// Operator parameters whose values size things (counts, shapes, axes) and a few others.
const ATTR_KEYS: [&str; 36] = [
    "num_args",
    "num_outputs",
    "num_hidden",
    "num_filter",
    "num_group",
    "kernel",
    "stride",
    "pad",
    "dilate",
    "adj",
    "target_shape",
    "shape",
    "axis",
    "axes",
    "dim",
    "depth",
    "input_dim",
    "output_dim",
    "begin",
    "end",
    "step",
    "act_type",
    "pool_type",
    "p",
    "eps",
    "momentum",
    "squeeze_axis",
    "no_bias",
    "global_pool",
    "keepdims",
    "exclude",
    "__shape__",
    "__dtype__",
    "__init__",
    "__lr_mult__",
    "workspace",
];

/// Attribute values: huge and odd numbers, tuples, nonsense.
const ATTR_VALUES: [&str; 32] = [
    "100000000",
    "1000000",
    "4294967296",
    "2147483648",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551616",
    "-1",
    "0",
    "1",
    "(100000000, 100000000)",
    "(4294967296,)",
    "(1048576, 1048576, 1048576)",
    "(0,)",
    "()",
    "(-1, -2)",
    "(0, -1)",
    "[1,2,3]",
    "(1,,2)",
    "(",
    ")",
    "1e308",
    "nan",
    "inf",
    "True",
    "None",
    "",
    "relu",
    "max",
    " 7 ",
    "3L",
    "-0",
];

const HIDDEN_KEYS: [&str; 12] = [
    "lr_mult",
    "wd_mult",
    "ctx_group",
    "force_mirroring",
    "mirror_stage",
    "data_lr_mult",
    "weight_wd_mult",
    "bias_lr_mult",
    "gamma_lr_mult",
    "_lr_mult",
    "lr_mult_lr_mult",
    "moving_mean_wd_mult",
];

const UNKNOWN_OPS: [&str; 8] = [
    "NotAnOp",
    "",
    "null",
    "Custom",
    "concat ",
    "_contrib_Nope",
    "\u{0}",
    "FullyConnectedFullyConnected",
];

const VERSIONS: [i64; 12] = [
    800,
    899,
    900,
    903,
    904,
    905,
    10900,
    10901,
    10902,
    -1,
    0,
    i64::MAX,
];

/// 1 to 3 structural mutations of a symbol JSON text; None when `text` is not JSON or the
/// result would be longer than [`MAX_INPUT`].
pub fn json(rng: &mut Rng, text: &[u8], ops: &[&'static str]) -> Option<Vec<u8>> {
    let mut root: Value = serde_json::from_slice(text).ok()?;
    for _ in 0..1 + rng.below(3) {
        json_one(rng, &mut root, ops);
    }
    let mut w = Limited(Vec::new());
    if rng.chance(2, 3) {
        serde_json::to_writer(&mut w, &root).ok()?;
    } else {
        serde_json::to_writer_pretty(&mut w, &root).ok()?;
    }
    Some(w.0)
}

/// A buffer that refuses to grow past [`MAX_INPUT`] (a nested value repeated many times and
/// pretty-printed would otherwise take gigabytes).
struct Limited(Vec<u8>);

impl std::io::Write for Limited {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > MAX_INPUT {
            return Err(std::io::Error::other("the mutated input is too long"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// How many copies of `v` fit in an input (at most `want`).
fn copies(v: &Value, want: usize) -> usize {
    let size = serde_json::to_vec(v).map_or(MAX_INPUT, |b| b.len().max(1));
    want.min(MAX_INPUT / size)
}

fn nodes_mut(root: &mut Value) -> Option<&mut Vec<Value>> {
    root.get_mut("nodes")?.as_array_mut()
}

/// A random node as an object (None when there are none).
fn some_node<'a>(rng: &mut Rng, root: &'a mut Value) -> Option<&'a mut Map<String, Value>> {
    let nodes = nodes_mut(root)?;
    if nodes.is_empty() {
        return None;
    }
    let i = rng.below(nodes.len());
    nodes[i].as_object_mut()
}

/// The attribute map of a node (`attrs`, else `attr` or `param`, created when missing).
fn attrs_of<'a>(
    rng: &mut Rng,
    node: &'a mut Map<String, Value>,
) -> Option<&'a mut Map<String, Value>> {
    let key = ["attrs", "attr", "param"]
        .into_iter()
        .find(|k| node.contains_key(*k))
        .unwrap_or(if rng.chance(1, 4) { "param" } else { "attrs" });
    node.entry(key)
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
}

fn attr_value(rng: &mut Rng) -> Value {
    match rng.below(8) {
        0 => {
            // a long tuple
            let n = [10usize, 100, 1000, 10000][rng.below(4)];
            let elem = rng.pick(&["1", "0", "100000", "-1"]).to_string();
            Value::String(format!("({})", vec![elem; n].join(",")))
        }
        1 => {
            // deep parentheses
            let n = [10usize, 1000, 20000][rng.below(3)];
            Value::String(format!("{}1{}", "(".repeat(n), ")".repeat(n)))
        }
        2 => Value::from(*rng.pick(&[u64::MAX, 1 << 53, 100_000_000, 0])),
        3 => Value::from(*rng.pick(&[-1i64, i64::MIN])),
        4 => Value::from(1e308),
        _ => Value::String(rng.pick(&ATTR_VALUES).to_string()),
    }
}

/// An interesting JSON number for an entry `[node, index, version]` of node `i`.
fn entry_number(rng: &mut Rng, i: usize) -> Value {
    match rng.below(10) {
        0 => Value::from(i),
        1 => Value::from(i + 1),
        2 => Value::from(-1),
        3 => Value::from(1u64 << 32),
        4 => Value::from(u64::MAX),
        5 => Value::from(1e20),
        6 => Value::from(0.5),
        7 => Value::from(u32::MAX),
        8 => Value::String("0".into()),
        _ => Value::from(rng.below(4)),
    }
}

fn nested(rng: &mut Rng) -> Value {
    let depth = *rng.pick(&[8usize, 64, 126, 127, 128, 129, 200, 500]);
    let mut v = Value::from(0);
    let arrays = rng.chance(1, 2);
    for _ in 0..depth {
        v = if arrays {
            Value::Array(vec![v])
        } else {
            let mut m = Map::new();
            m.insert("a".into(), v);
            Value::Object(m)
        };
    }
    v
}

fn json_one(rng: &mut Rng, root: &mut Value, ops: &[&'static str]) {
    match rng.below(12) {
        // an operator parameter set to a huge or odd value
        0..=2 => {
            let Some(node) = some_node(rng, root) else {
                return;
            };
            let Some(attrs) = attrs_of(rng, node) else {
                return;
            };
            let existing: Vec<String> = attrs.keys().cloned().collect();
            let key = if !existing.is_empty() && rng.chance(1, 2) {
                rng.pick(&existing).clone()
            } else {
                rng.pick(&ATTR_KEYS).to_string()
            };
            let v = attr_value(rng);
            attrs.insert(key, v);
        }
        // another (known or unknown) operator
        3 => {
            let Some(node) = some_node(rng, root) else {
                return;
            };
            let op = if rng.chance(3, 4) && !ops.is_empty() {
                rng.pick(ops).to_string()
            } else {
                rng.pick(&UNKNOWN_OPS).to_string()
            };
            node.insert("op".into(), Value::String(op));
        }
        // deep nesting somewhere a value is expected
        4 => {
            let v = nested(rng);
            match rng.below(4) {
                0 => {
                    if let Some(node) = some_node(rng, root) {
                        node.insert("inputs".into(), Value::Array(vec![v]));
                    }
                }
                1 => {
                    if let Some(node) = some_node(rng, root) {
                        node.insert("attrs".into(), v);
                    }
                }
                2 => {
                    if let Some(o) = root.as_object_mut() {
                        o.insert("heads".into(), Value::Array(vec![v]));
                    }
                }
                _ => {
                    if let Some(nodes) = nodes_mut(root) {
                        nodes.push(v);
                    }
                }
            }
        }
        // an input entry with an odd node / index / version
        5 => {
            let Some(nodes) = nodes_mut(root) else { return };
            if nodes.is_empty() {
                return;
            }
            let i = rng.below(nodes.len());
            let Some(inputs) = nodes[i].get_mut("inputs").and_then(Value::as_array_mut) else {
                return;
            };
            if inputs.is_empty() {
                inputs.push(Value::Array(vec![Value::from(0), Value::from(0)]));
            }
            let k = rng.below(inputs.len());
            let n = entry_number(rng, i);
            match inputs[k].as_array_mut() {
                Some(e) if !e.is_empty() && rng.chance(3, 4) => {
                    let j = rng.below(e.len());
                    e[j] = n;
                }
                _ => {
                    let shapes = [
                        vec![],
                        vec![n.clone()],
                        vec![n.clone(), n.clone(), n.clone(), n],
                    ];
                    inputs[k] = Value::Array(rng.pick(&shapes).clone());
                }
            }
        }
        // heads repeated or pointing far away
        6 => {
            let Some(heads) = root.get_mut("heads").and_then(Value::as_array_mut) else {
                return;
            };
            if heads.is_empty() {
                heads.push(Value::Array(vec![
                    Value::from(0),
                    Value::from(0),
                    Value::from(0),
                ]));
            }
            if rng.chance(1, 2) {
                let h = heads[rng.below(heads.len())].clone();
                let times = copies(&h, *rng.pick(&[2usize, 10, 100, 1000, 5000]));
                heads.extend(std::iter::repeat_n(h, times));
            } else {
                let k = rng.below(heads.len());
                if let Some(e) = heads[k].as_array_mut() {
                    if !e.is_empty() {
                        let j = rng.below(e.len());
                        e[j] = entry_number(rng, 0);
                    }
                }
            }
        }
        // the file version (old versions run the upgrade passes)
        7 => {
            let Some(o) = root.as_object_mut() else {
                return;
            };
            match rng.below(6) {
                0 => {
                    o.remove("attrs");
                }
                1 => {
                    o.insert(
                        "attrs".into(),
                        serde_json::json!({"mxnet_version": "10901"}),
                    );
                }
                _ => {
                    let v = *rng.pick(&VERSIONS);
                    o.insert(
                        "attrs".into(),
                        serde_json::json!({"mxnet_version": ["int", v]}),
                    );
                }
            }
        }
        // pre-1.0 reserved keys (moved onto variables by the upgrade)
        8 => {
            let Some(node) = some_node(rng, root) else {
                return;
            };
            let Some(attrs) = attrs_of(rng, node) else {
                return;
            };
            let k = rng.pick(&HIDDEN_KEYS).to_string();
            attrs.insert(k, Value::String("0.5".into()));
        }
        // nodes copied: appended (refs stay valid), inserted (refs shift) or a long chain
        9 => {
            let Some(nodes) = nodes_mut(root) else { return };
            if nodes.is_empty() {
                return;
            }
            let i = rng.below(nodes.len());
            let n = nodes[i].clone();
            match rng.below(3) {
                0 => {
                    let times = copies(&n, 1 + rng.below(50));
                    nodes.extend(std::iter::repeat_n(n, times));
                }
                1 => nodes.insert(rng.below(nodes.len() + 1), n),
                _ => {
                    let len = *rng.pick(&[10usize, 100, 1000]);
                    let op = *rng.pick(&["BlockGrad", "Activation", "Flatten", "Concat"]);
                    let start = nodes.len();
                    for j in 0..len {
                        let prev = if j == 0 { i } else { start + j - 1 };
                        nodes.push(serde_json::json!({
                            "op": op, "name": format!("c{j}"),
                            "attrs": {"act_type": "relu", "num_args": "1"},
                            "inputs": [[prev, 0, 0]]
                        }));
                    }
                    let last = nodes.len() - 1;
                    if let Some(o) = root.as_object_mut() {
                        o.insert("heads".into(), serde_json::json!([[last, 0, 0]]));
                    }
                }
            }
        }
        // a key removed
        10 => {
            if rng.chance(1, 2) {
                let Some(node) = some_node(rng, root) else {
                    return;
                };
                let k = *rng.pick(&["op", "name", "inputs", "attrs", "attr", "param"]);
                node.shift_remove(k);
            } else if let Some(o) = root.as_object_mut() {
                let k = *rng.pick(&["nodes", "heads", "arg_nodes", "attrs", "node_row_ptr"]);
                o.shift_remove(k);
            }
        }
        // a name changed (duplicates, empty, odd characters)
        _ => {
            let Some(node) = some_node(rng, root) else {
                return;
            };
            let name = *rng.pick(&["", "data", "a\"b", "x_weight", "\u{1}", "fc1", "\\"]);
            node.insert("name".into(), Value::String(name.into()));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Shrinking JSON by its structure
// ---------------------------------------------------------------------------------------------

/// Smaller versions of a JSON text, for shrinking a finding: the text compacted, then with one
/// object member or array element removed (larger ones first). Empty when it is not JSON.
pub fn json_shrinks(text: &[u8]) -> Vec<Vec<u8>> {
    let Ok(root) = serde_json::from_slice::<Value>(text) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Ok(compact) = serde_json::to_vec(&root) {
        if compact.len() < text.len() {
            out.push(compact);
        }
    }
    let mut paths: Vec<(usize, Vec<Step>)> = Vec::new();
    collect(&root, &mut Vec::new(), &mut paths);
    paths.sort_by_key(|p| std::cmp::Reverse(p.0));
    for (_, path) in paths {
        let mut v = root.clone();
        if remove(&mut v, &path) {
            if let Ok(b) = serde_json::to_vec(&v) {
                out.push(b);
            }
        }
    }
    out
}

#[derive(Clone)]
enum Step {
    Key(String),
    Index(usize),
}

/// Every member and element below `v`, with the size of its subtree.
fn collect(v: &Value, path: &mut Vec<Step>, out: &mut Vec<(usize, Vec<Step>)>) -> usize {
    let mut size = 1;
    let children: Vec<(Step, &Value)> = match v {
        Value::Object(m) => m.iter().map(|(k, c)| (Step::Key(k.clone()), c)).collect(),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .map(|(i, c)| (Step::Index(i), c))
            .collect(),
        _ => Vec::new(),
    };
    for (step, c) in children {
        path.push(step);
        let n = collect(c, path, out);
        out.push((n, path.clone()));
        path.pop();
        size += n;
    }
    size
}

fn remove(v: &mut Value, path: &[Step]) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let mut cur = v;
    for step in parents {
        let next = match (step, cur) {
            (Step::Key(k), Value::Object(m)) => m.get_mut(k),
            (Step::Index(i), Value::Array(a)) => a.get_mut(*i),
            _ => None,
        };
        let Some(n) = next else { return false };
        cur = n;
    }
    match (last, cur) {
        (Step::Key(k), Value::Object(m)) => m.shift_remove(k).is_some(),
        (Step::Index(i), Value::Array(a)) if *i < a.len() => {
            a.remove(*i);
            true
        }
        _ => false,
    }
}
