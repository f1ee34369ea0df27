//! Valid seed inputs, made here: with the crate's own writers where it has them (`.params`,
//! `.states`, symbol JSON), by hand for the legacy layouts and for IDX and CSV.

use super::target::Reader;
use flate2::write::GzEncoder;
use flate2::Compression;
use mxfn_core::module::OptStates;
use mxfn_core::optimizer::State;
use mxfn_core::symbol::json::to_json;
use mxfn_core::tensor::params_file::{self, NdList};
use mxfn_core::tensor::{states_file, ALL_DTYPES};
use mxfn_core::{DType, NDArray, Symbol};
use std::io::Write;

pub fn seeds(reader: Reader) -> Vec<Vec<u8>> {
    match reader {
        Reader::Params => params(),
        Reader::SymbolJson => symbol_json(),
        Reader::States => states(),
        Reader::Idx => idx(),
        Reader::Csv => csv(),
    }
}

/// An array of `shape` holding 0, 1, 2, … (as `dtype`).
fn arr(shape: &[usize], dtype: DType) -> NDArray {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| (i % 100) as f64).collect();
    NDArray::from_f64_slice(shape, &v, dtype).unwrap_or_else(|_| NDArray::zeros(shape, dtype))
}

/// Bytes from hex text; `#` starts a comment.
pub fn hex(text: &str) -> Vec<u8> {
    text.lines()
        .flat_map(|l| l.split('#').next().unwrap_or("").split_whitespace())
        .filter_map(|b| u8::from_str_radix(b, 16).ok())
        .collect()
}

/// The dense record of one array, as the `.params` writer lays it out.
pub fn record(a: &NDArray) -> Vec<u8> {
    let f = params_file::encode(&NdList::List(vec![a.clone()]));
    f[24..f.len() - 8].to_vec()
}

fn params() -> Vec<Vec<u8>> {
    let mut out = vec![
        params_file::encode(&NdList::Dict(vec![
            ("arg:fc1_weight".into(), arr(&[2, 3], DType::Float32)),
            ("arg:fc1_bias".into(), arr(&[2], DType::Float32)),
            ("aux:bn_moving_mean".into(), arr(&[1], DType::Int64)),
        ])),
        params_file::encode(&NdList::List(
            ALL_DTYPES.iter().map(|&d| arr(&[3], d)).collect(),
        )),
        params_file::encode(&NdList::List(
            ALL_DTYPES.iter().map(|&d| arr(&[2, 1, 2], d)).collect(),
        )),
        // a 0-d array makes every record V3
        params_file::encode(&NdList::List(vec![
            arr(&[], DType::Float32),
            arr(&[2], DType::Float16),
        ])),
        params_file::encode(&NdList::Dict(vec![
            ("arg:empty".into(), arr(&[0, 5], DType::Float32)),
            ("arg:big".into(), arr(&[8, 8], DType::Float64)),
        ])),
        params_file::encode(&NdList::List(vec![])),
    ];
    // V1, V0 and V2 records in one list (FORMAT.md's legacy layouts).
    out.push(hex("
        12 01 00 00 00 00 00 00  00 00 00 00 00 00 00 00  03 00 00 00 00 00 00 00
        c8 fa 93 f9  01 00 00 00  02 00 00 00 00 00 00 00  01 00 00 00 00 00 00 00
        00 00 00 00  00 00 80 3f 00 00 00 40                       # V1 [1.0, 2.0]
        01 00 00 00  03 00 00 00  01 00 00 00 00 00 00 00
        04 00 00 00  07 00 00 00 08 00 00 00 09 00 00 00           # V0 [7, 8, 9]
        c9 fa 93 f9  00 00 00 00  01 00 00 00  01 00 00 00 00 00 00 00
        01 00 00 00 00 00 00 00  01 00 00 00  00 00 00 00 00 00 d0 3f  # V2 [0.25]
        00 00 00 00 00 00 00 00                                    # K = 0
    "));
    out
}

fn states() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut st = OptStates::new();
    st.insert(0, State::Array(arr(&[2, 3], DType::Float32)));
    st.insert(1, State::None);
    out.push(states_file::encode(&st));

    let mut st = OptStates::new();
    st.insert(
        0,
        State::Tuple(vec![
            State::Array(arr(&[4], DType::Float32)),
            State::Array(arr(&[4], DType::Float32)),
        ]),
    );
    st.insert(
        3,
        State::Tuple(vec![State::None, State::Array(arr(&[2], DType::Float64))]),
    );
    st.insert(300, State::Array(arr(&[], DType::Float32))); // BININT2 key, 0-d (V3) record
    st.insert(70_000, State::Array(arr(&[100], DType::Float32))); // BININT key, BINBYTES
    st.insert(1 << 40, State::Tuple(vec![])); // LONG1 key, empty tuple
    st.insert(
        5,
        State::Tuple(vec![
            State::None,
            State::None,
            State::Tuple(vec![State::Array(arr(&[1], DType::Int32))]),
            State::None,
        ]),
    );
    out.push(states_file::encode(&st));

    let mut st = OptStates::new();
    st.insert(7, State::Array(arr(&[3], DType::Float16)));
    out.push(states_file::encode(&st));
    out.push(states_file::encode(&OptStates::new()));

    // Opcodes the writer never uses: protocol 5, GLOBAL, BINPUT / LONG_BINPUT / LONG_BINGET,
    // NEWOBJ, BINUNICODE / BINUNICODE8, BYTEARRAY8, SHORT_BINBYTES, LONG1, MARK … SETITEMS.
    let rec = record(&arr(&[2], DType::Float32));
    let mut p = vec![0x80, 5, b'}', 0x94, b'('];
    p.extend([b'K', 0]);
    p.extend(b"cmxnet.ndarray.ndarray\nNDArray\n");
    p.extend([b'q', 1, b'N', 0x85, b'r', 2, 0, 0, 0, b'R', b'}']);
    p.extend([b'X', 6, 0, 0, 0]);
    p.extend(b"handle");
    p.push(0x96);
    p.extend((rec.len() as u64).to_le_bytes());
    p.extend(&rec);
    p.extend([b's', b'b']);
    p.extend([b'M', 0x2c, 0x01, b'N']);
    p.extend([
        b'J', 0, 0, 1, 0, b'h', 1, b'j', 2, 0, 0, 0, 0x81, b'}', 0x8d,
    ]);
    p.extend(6u64.to_le_bytes());
    p.extend(b"handle");
    p.extend([0x8c, 8]);
    p.extend(b"builtins");
    p.extend([0x8c, 9]);
    p.extend(b"bytearray");
    p.extend([0x93, b'C', rec.len() as u8]);
    p.extend(&rec);
    p.extend([0x85, b'R', b's', b'b', 0x8a, 1, 5, b')', b'u', b'.']);
    out.push(p);
    out
}

fn sym(op: &str, name: &str, attrs: &[(&str, &str)], inputs: Vec<Symbol>) -> Option<Symbol> {
    Symbol::create(
        op,
        Some(name),
        attrs,
        inputs.into_iter().map(|s| (None, s)).collect(),
    )
    .ok()
}

fn mlp() -> Option<Symbol> {
    let fc1 = sym(
        "FullyConnected",
        "fc1",
        &[("num_hidden", "8")],
        vec![Symbol::variable("data")],
    )?;
    let act = sym("Activation", "relu1", &[("act_type", "relu")], vec![fc1])?;
    let fc2 = sym("FullyConnected", "fc2", &[("num_hidden", "4")], vec![act])?;
    sym("SoftmaxOutput", "softmax", &[], vec![fc2])
}

fn conv_net() -> Option<Symbol> {
    let conv = sym(
        "Convolution",
        "conv1",
        &[
            ("kernel", "(3, 3)"),
            ("num_filter", "4"),
            ("pad", "(1, 1)"),
            ("stride", "(1, 1)"),
        ],
        vec![Symbol::variable("data")],
    )?;
    let bn = sym("BatchNorm", "bn1", &[("fix_gamma", "False")], vec![conv])?;
    let pool = sym(
        "Pooling",
        "pool1",
        &[
            ("kernel", "(2, 2)"),
            ("pool_type", "max"),
            ("stride", "(2, 2)"),
        ],
        vec![bn],
    )?;
    let flat = sym("Flatten", "flat", &[], vec![pool])?;
    let drop = sym("Dropout", "drop", &[("p", "0.5")], vec![flat])?;
    let lr = sym("LeakyReLU", "lrelu", &[("act_type", "leaky")], vec![drop])?;
    sym("LinearRegressionOutput", "out", &[], vec![lr])
}

/// Shape ops, several outputs, variadic ops.
fn shapes() -> Option<Symbol> {
    let (a, b) = (Symbol::variable("a"), Symbol::variable("b"));
    let cat = sym("Concat", "cat", &[("dim", "1")], vec![a.clone(), b.clone()])?;
    let split = sym("SliceChannel", "split", &[("num_outputs", "2")], vec![cat])?;
    let r = sym(
        "Reshape",
        "r",
        &[("shape", "(0, -1)")],
        vec![split.output(0).ok()?],
    )?;
    let t = sym("transpose", "t", &[("axes", "(1, 0)")], vec![r])?;
    let e = sym("expand_dims", "e", &[("axis", "0")], vec![t])?;
    let st = sym("stack", "st", &[("axis", "0")], vec![a.clone(), b.clone()])?;
    let add = sym("add_n", "add", &[], vec![a, b, Symbol::variable("c")])?;
    Some(Symbol::group(&[e, split.output(1).ok()?, st, add]))
}

/// Embedding, one_hot, reductions, slicing, linear algebra.
fn misc() -> Option<Symbol> {
    let v = Symbol::variable;
    let emb = sym(
        "Embedding",
        "emb",
        &[("input_dim", "10"), ("output_dim", "4")],
        vec![v("words")],
    )?;
    let oh = sym("one_hot", "oh", &[("depth", "5")], vec![v("label")])?;
    let am = sym("argmax", "am", &[("axis", "1")], vec![emb.clone()])?;
    let sl = sym(
        "slice_axis",
        "sl",
        &[("axis", "1"), ("begin", "0"), ("end", "2")],
        vec![emb.clone()],
    )?;
    let cl = sym("clip", "cl", &[("a_min", "0"), ("a_max", "1")], vec![sl])?;
    let d = sym("dot", "d", &[], vec![oh, v("w")])?;
    let bd = sym("batch_dot", "bd", &[], vec![emb, v("m")])?;
    let ln = sym("LayerNorm", "ln", &[], vec![d])?;
    let sm = sym("softmax", "sm", &[("axis", "-1")], vec![ln])?;
    Some(Symbol::group(&[am, cl, bd, sm]))
}

fn symbol_json() -> Vec<Vec<u8>> {
    let syms = [
        mlp(),
        conv_net(),
        shapes(),
        misc(),
        Some(Symbol::variable("data")),
    ];
    let mut out: Vec<Vec<u8>> = syms
        .into_iter()
        .flatten()
        .map(|s| to_json(&s).into_bytes())
        .collect();

    // MXNet 0.8.0 layout: no version, `param` and `attr`, bare reserved keys, aux states
    // missing from BatchNorm's inputs, argmax with axis -1.
    out.push(
        br#"{"nodes": [
 {"op": "null", "param": {}, "name": "data", "inputs": [], "backward_source_id": -1, "attr": {"ctx_group": "stage1"}},
 {"op": "null", "param": {}, "name": "fc1_weight", "inputs": [], "attr": {"lr_mult": "0.5", "wd_mult": "0"}},
 {"op": "null", "param": {}, "name": "fc1_bias", "inputs": []},
 {"op": "FullyConnected", "param": {"no_bias": "False", "num_hidden": "16"}, "name": "fc1", "inputs": [[0, 0], [1, 0], [2, 0]], "attr": {"bias_lr_mult": "2"}},
 {"op": "null", "param": {}, "name": "bn1_gamma", "inputs": []},
 {"op": "null", "param": {}, "name": "bn1_beta", "inputs": []},
 {"op": "BatchNorm", "param": {"eps": "0.001", "fix_gamma": "False", "momentum": "0.9"}, "name": "bn1", "inputs": [[3, 0], [4, 0], [5, 0]]},
 {"op": "argmax", "param": {"axis": "-1"}, "name": "am", "inputs": [[6, 0]]}
], "arg_nodes": [0, 1, 2, 4, 5], "heads": [[7, 0]]}"#
            .to_vec(),
    );
    // MXNet 0.9.3: a version, aux states present, no `__init__` on them yet.
    out.push(
        br#"{"nodes": [
 {"op": "null", "name": "data", "inputs": []},
 {"op": "null", "name": "bn_gamma", "inputs": []},
 {"op": "null", "name": "bn_beta", "inputs": []},
 {"op": "null", "name": "bn_moving_mean", "inputs": []},
 {"op": "null", "name": "bn_moving_var", "inputs": []},
 {"op": "BatchNorm", "attr": {"fix_gamma": "True", "data_lr_mult": "3"}, "name": "bn", "inputs": [[0, 0, 0], [1, 0, 0], [2, 0, 0], [3, 0, 0], [4, 0, 0]]},
 {"op": "Concat", "attr": {"num_args": "2", "dim": "1"}, "name": "cat", "inputs": [[5, 0, 0], [0, 0, 0]]}
], "arg_nodes": [0, 1, 2, 3, 4], "node_row_ptr": [0, 1, 2, 3, 4, 5, 8, 9], "heads": [[6, 0, 0]], "attrs": {"mxnet_version": ["int", 903]}}"#
            .to_vec(),
    );
    out
}

fn gz(parts: &[&[u8]]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::default());
    for p in parts {
        e.write_all(p).unwrap_or_default();
    }
    e.finish().unwrap_or_default()
}

/// An IDX file: big-endian magic and sizes, then the bytes.
pub fn idx_file(magic: u32, dims: &[u32], payload: &[u8]) -> Vec<u8> {
    let mut v = magic.to_be_bytes().to_vec();
    dims.iter()
        .for_each(|d| v.extend_from_slice(&d.to_be_bytes()));
    v.extend_from_slice(payload);
    v
}

fn idx() -> Vec<Vec<u8>> {
    let px: Vec<u8> = (0..18u8).map(|i| i * 14).collect();
    let images = idx_file(2051, &[2, 3, 3], &px);
    let labels = idx_file(2049, &[5], &[0, 1, 2, 9, 255]);
    let mut out = vec![
        gz(&[&images]),
        gz(&[&labels]),
        idx_file(2051, &[0, 28, 28], &[]),
        idx_file(2051, &[1, 2, 2], &[0, 255, 128, 7]),
    ];
    // two gzip members (MultiGzDecoder reads them as one stream)
    let mut two = gz(&[&images[..8]]);
    two.extend(gz(&[&images[8..]]));
    out.push(two);
    out.push(images);
    out.push(labels);
    out
}

fn csv() -> Vec<Vec<u8>> {
    [
        "1,2,3\n4,5,6\n",
        " 1.5 , -2e3 ,inf\r\n\n7,8,9",
        "0\n1\n2\n",
        "nan,NaN,-0\n1,2,3\n",
        "1,2\n3,4\n5,6\n",
        "1e308,1e-308,-1\n",
        "",
        "\n\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}
