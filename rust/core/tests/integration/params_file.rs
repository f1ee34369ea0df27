//! NDArray list files (`tensor::params_file`) against the MXNet 1.9.1 conformance files, and atomic save/load.
//!
//! The data directory is `$MXFN_CONFORMANCE_DIR` if set, else the project's copy under
//! `tests/data/conformance`, else the shared `../shared/conformance`. The `.npz` files cannot be
//! read without extra crates, so each decoded array's bytes are compared with the data bytes at
//! the end of its record in the original file (offsets from the `.json` metadata).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mxfn_core::tensor::params_file::{decode, encode, load, save, NdList};
use mxfn_core::{Context, DType, Error, NDArray};
use std::path::{Path, PathBuf};

/// A minimal JSON reader for the metadata files (no serde in this crate).
mod json {
    /// A JSON value; objects keep their key order.
    #[derive(Debug, Clone)]
    pub enum Value {
        Null,
        True,
        False,
        Num(f64),
        Str(String),
        Arr(Vec<Value>),
        Obj(Vec<(String, Value)>),
    }

    impl Value {
        pub fn get(&self, key: &str) -> &Value {
            match self {
                Value::Obj(o) => {
                    &o.iter()
                        .find(|(k, _)| k == key)
                        .unwrap_or_else(|| panic!("no key {key:?}"))
                        .1
                }
                v => panic!("not an object when looking up {key:?}: {v:?}"),
            }
        }
        pub fn opt(&self, key: &str) -> Option<&Value> {
            match self {
                Value::Obj(o) => o.iter().find(|(k, _)| k == key).map(|(_, v)| v),
                _ => None,
            }
        }
        pub fn str(&self) -> &str {
            match self {
                Value::Str(s) => s,
                v => panic!("not a string: {v:?}"),
            }
        }
        pub fn arr(&self) -> &[Value] {
            match self {
                Value::Arr(a) => a,
                v => panic!("not an array: {v:?}"),
            }
        }
        pub fn obj(&self) -> &[(String, Value)] {
            match self {
                Value::Obj(o) => o,
                v => panic!("not an object: {v:?}"),
            }
        }
        pub fn usize(&self) -> usize {
            match self {
                Value::Num(n) if *n >= 0.0 && n.fract() == 0.0 => *n as usize,
                v => panic!("not a non-negative integer: {v:?}"),
            }
        }
        pub fn shape(&self) -> Vec<usize> {
            self.arr().iter().map(Value::usize).collect()
        }
    }

    pub fn parse(text: &str) -> Value {
        let chars: Vec<char> = text.chars().collect();
        let mut p = Parser { s: &chars, i: 0 };
        let v = p.value();
        p.ws();
        assert_eq!(p.i, chars.len(), "trailing text in JSON");
        v
    }

    struct Parser<'a> {
        s: &'a [char],
        i: usize,
    }

    impl Parser<'_> {
        fn ws(&mut self) {
            while self.s.get(self.i).is_some_and(|c| c.is_whitespace()) {
                self.i += 1;
            }
        }
        fn next(&mut self) -> char {
            let c = *self.s.get(self.i).expect("JSON ends early");
            self.i += 1;
            c
        }
        fn eat(&mut self, word: &str) {
            for w in word.chars() {
                assert_eq!(self.next(), w, "bad JSON literal");
            }
        }
        fn value(&mut self) -> Value {
            self.ws();
            match self.s.get(self.i).copied().expect("JSON ends early") {
                '{' => {
                    self.i += 1;
                    let mut o = Vec::new();
                    loop {
                        self.ws();
                        if self.s[self.i] == '}' {
                            self.i += 1;
                            return Value::Obj(o);
                        }
                        let k = self.string();
                        self.ws();
                        self.eat(":");
                        o.push((k, self.value()));
                        self.ws();
                        if self.s[self.i] == ',' {
                            self.i += 1;
                        }
                    }
                }
                '[' => {
                    self.i += 1;
                    let mut a = Vec::new();
                    loop {
                        self.ws();
                        if self.s[self.i] == ']' {
                            self.i += 1;
                            return Value::Arr(a);
                        }
                        a.push(self.value());
                        self.ws();
                        if self.s[self.i] == ',' {
                            self.i += 1;
                        }
                    }
                }
                '"' => Value::Str(self.string()),
                't' => {
                    self.eat("true");
                    Value::True
                }
                'f' => {
                    self.eat("false");
                    Value::False
                }
                'n' => {
                    self.eat("null");
                    Value::Null
                }
                _ => {
                    let start = self.i;
                    while self
                        .s
                        .get(self.i)
                        .is_some_and(|c| "+-0123456789.eE".contains(*c))
                    {
                        self.i += 1;
                    }
                    let t: String = self.s[start..self.i].iter().collect();
                    Value::Num(
                        t.parse()
                            .unwrap_or_else(|_| panic!("bad JSON number {t:?}")),
                    )
                }
            }
        }
        fn hex4(&mut self) -> u32 {
            let t: String = (0..4).map(|_| self.next()).collect();
            u32::from_str_radix(&t, 16).expect("bad \\u escape")
        }
        fn string(&mut self) -> String {
            self.eat("\"");
            let mut out = String::new();
            loop {
                match self.next() {
                    '"' => return out,
                    '\\' => match self.next() {
                        'n' => out.push('\n'),
                        't' => out.push('\t'),
                        'r' => out.push('\r'),
                        'b' => out.push('\u{8}'),
                        'f' => out.push('\u{c}'),
                        'u' => {
                            let mut u = self.hex4();
                            if (0xD800..0xDC00).contains(&u) {
                                self.eat("\\u");
                                u = 0x10000 + ((u - 0xD800) << 10) + (self.hex4() - 0xDC00);
                            }
                            out.push(char::from_u32(u).expect("bad code point"));
                        }
                        c => out.push(c),
                    },
                    c => out.push(c),
                }
            }
        }
    }
}

fn data_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("MXFN_CONFORMANCE_DIR") {
        return PathBuf::from(d);
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let local = manifest.join("../../tests/data/conformance");
    if local.is_dir() {
        local
    } else {
        manifest.join("../../../shared/conformance")
    }
}

fn checkpoint_file(name: &str) -> PathBuf {
    data_dir().join("checkpoints").join(name)
}

fn read(name: &str) -> Vec<u8> {
    let p = checkpoint_file(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn metadata(name: &str) -> json::Value {
    json::parse(&String::from_utf8(read(name)).unwrap())
}

/// (key, array) pairs of a decoded file; list entries are keyed "0", "1", … like the metadata.
fn entries(l: &NdList) -> Vec<(String, NDArray)> {
    match l {
        NdList::List(v) => v
            .iter()
            .enumerate()
            .map(|(i, a)| (i.to_string(), a.clone()))
            .collect(),
        NdList::Dict(d) => d.clone(),
    }
}

fn kind(l: &NdList) -> &'static str {
    match l {
        NdList::List(_) => "list",
        NdList::Dict(_) => "dict",
    }
}

/// Checks decoded entries against `meta` entries: key, dtype, type flag, shape, cpu(0) and
/// the data bytes at the end of each record of `file`.
fn check_entries(name: &str, file: &[u8], got: &[(String, NDArray)], meta: &[json::Value]) {
    assert_eq!(got.len(), meta.len(), "{name}: entry count");
    for (i, ((key, a), m)) in got.iter().zip(meta).enumerate() {
        let what = format!("{name} entry {i} ({key})");
        assert_eq!(key, m.get("key").str(), "{what}: key");
        assert_eq!(a.dtype().name(), m.get("dtype").str(), "{what}: dtype");
        assert_eq!(
            a.dtype().mxnet_flag() as usize,
            m.get("type_flag").usize(),
            "{what}: type flag"
        );
        assert_eq!(
            a.shape(),
            m.get("shape").shape().as_slice(),
            "{what}: shape"
        );
        assert_eq!(a.context(), Context::cpu(0), "{what}: context");
        let end = m.get("record_offset").usize() + m.get("record_nbytes").usize();
        let data = a.to_le_bytes();
        assert_eq!(
            data.len(),
            a.size() * a.dtype().size(),
            "{what}: data length"
        );
        assert_eq!(data, file[end - data.len()..end], "{what}: data bytes");
    }
}

#[test]
fn ndarray_files_decode_to_their_metadata() {
    for name in ["ndlist", "nddict", "ndempty", "ndlegacy"] {
        let file = read(&format!("{name}.params"));
        let meta = metadata(&format!("{name}.json"));
        assert_eq!(file.len(), meta.get("file_nbytes").usize());
        let l = decode(&file, name).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(kind(&l), meta.get("kind").str(), "{name}: kind");
        check_entries(name, &file, &entries(&l), meta.get("entries").arr());
        if let Some(order) = meta.opt("key_order_in_file") {
            let keys: Vec<String> = entries(&l).into_iter().map(|(k, _)| k).collect();
            let want: Vec<&str> = order.arr().iter().map(json::Value::str).collect();
            assert_eq!(keys, want, "{name}: key order");
        }
    }
}

#[test]
fn v2_files_re_encode_byte_for_byte() {
    for name in ["ndlist.params", "nddict.params", "ndempty.params"] {
        let file = read(name);
        assert_eq!(encode(&decode(&file, name).unwrap()), file, "{name}");
    }
    // The empty file is a list, and an empty dict writes the same bytes.
    assert_eq!(encode(&NdList::Dict(vec![])), read("ndempty.params"));
}

/// V3 records (0-d float32, int64 (2, 0), float64 (1, 2)) load; the bool record (flag 7) is
/// refused, so the whole file gives the bool error and its first three records are checked
/// through a copy of the file cut before the bool record.
#[test]
fn npshape_v3_records_decode_and_bool_is_refused() {
    let file = read("ndnpshape.params");
    let meta = metadata("ndnpshape.json");
    let ents = meta.get("entries").arr();
    let bool_entry = &ents[3];
    assert_eq!(bool_entry.get("type_flag").usize(), 7);

    match decode(&file, "ndnpshape.params") {
        Err(e @ Error::Format { .. }) => {
            let msg = e.to_string();
            // The type flag of a 1-d record: magic, storage type, ndim, one dim, context come first.
            let at = bool_entry.get("record_offset").usize() + 4 + 4 + 4 + 8 + 8;
            assert!(msg.contains(&format!("at byte {at} (array 3)")), "{msg}");
            assert!(msg.contains("bool (type flag 7) is not supported"), "{msg}");
        }
        other => panic!("expected the bool error, got {other:?}"),
    }

    let cut = bool_entry.get("record_offset").usize();
    let mut first3 = file[..cut].to_vec();
    first3[16..24].copy_from_slice(&3u64.to_le_bytes()); // N = 3
    first3.extend_from_slice(&0u64.to_le_bytes()); // K = 0
    let l = decode(&first3, "ndnpshape (first 3)").unwrap();
    assert_eq!(kind(&l), "list");
    let got = entries(&l);
    check_entries("ndnpshape", &file, &got, &ents[..3]);
    assert_eq!(
        got[0].1.to_f64_vec().len(),
        1,
        "the 0-d record holds one element"
    );
    // A list with a 0-d array is written as V3 throughout, as MXNet does under np_shape.
    assert_eq!(encode(&l), first3);
}

#[test]
fn sparse_files_are_refused_clearly() {
    let meta = metadata("ndsparse.json");
    let at = meta.get("entries").arr()[0].get("record_offset").usize() + 4;
    let e = decode(&read("ndsparse.params"), "ndsparse.params").unwrap_err();
    assert!(matches!(e, Error::Format { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!("ndsparse.params: at byte {at} (array 0): ")),
        "{msg}"
    );
    assert!(
        msg.contains("sparse storage (row_sparse/csr) is not supported"),
        "{msg}"
    );
}

#[test]
fn checkpoints_are_arg_aux_dicts_and_re_encode() {
    let manifest = metadata("manifest.json");
    let models: Vec<&json::Value> = manifest
        .get("models")
        .arr()
        .iter()
        .chain(manifest.get("legacy_symbols").arr())
        .collect();
    let mut seen = Vec::new();
    for m in models {
        let name = m.get("files").get("params").str();
        let file = read(name);
        let l = decode(&file, name).unwrap_or_else(|e| panic!("{e}"));
        let NdList::Dict(d) = &l else {
            panic!("{name}: expected a dict")
        };
        let keys: Vec<&str> = d.iter().map(|(k, _)| k.as_str()).collect();
        let want: Vec<&str> = m
            .get("params_key_order")
            .arr()
            .iter()
            .map(json::Value::str)
            .collect();
        assert_eq!(keys, want, "{name}: keys");
        for (k, a) in d {
            let (prefix, param) = k.split_once(':').unwrap();
            let shapes = match prefix {
                "arg" => m.get("arg_shapes"),
                "aux" => m.get("aux_shapes"),
                p => panic!("{name}: unexpected prefix {p:?}"),
            };
            let shape = shapes
                .obj()
                .iter()
                .find(|(n, _)| n == param)
                .unwrap()
                .1
                .shape();
            assert_eq!(a.shape(), shape.as_slice(), "{name}: {k} shape");
            assert_eq!(a.dtype(), DType::Float32, "{name}: {k} dtype");
            assert_eq!(a.context(), Context::cpu(0), "{name}: {k} context");
        }
        assert_eq!(encode(&l), file, "{name}: re-encoding");
        seen.push(name.to_string());
    }
    for want in [
        "mlp-0001.params",
        "lenet-0002.params",
        "bnnet-0003.params",
        "legacy_v0800-0000.params",
        "legacy_v0903-0000.params",
    ] {
        assert!(seen.iter().any(|s| s == want), "{want} not in the manifest");
    }
}

/// A fresh empty directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("mxfn-params-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn save_load_round_trip_replaces_the_file() {
    let dir = TempDir::new("roundtrip");
    let path = dir.0.join("net-0001.params");
    let nddict = decode(&read("nddict.params"), "nddict.params").unwrap();
    save(&path, &nddict).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), read("nddict.params"));
    let back = load(&path).unwrap();
    assert_eq!(encode(&back), read("nddict.params"));

    // Saving again replaces the file; no temp file is left behind.
    let small = NdList::List(vec![NDArray::from_vec(&[2], vec![1.5f64, -2.0]).unwrap()]);
    save(&path, &small).unwrap();
    let NdList::List(l) = load(&path).unwrap() else {
        panic!("expected a list")
    };
    assert_eq!(l[0].to_f64_vec(), [1.5, -2.0]);
    assert_eq!(dir.names(), ["net-0001.params"]);
}

#[test]
fn failed_save_is_an_io_error_and_leaves_no_temp_file() {
    let dir = TempDir::new("failed");
    let list = NdList::List(vec![NDArray::ones(&[3], DType::Float32)]);

    // The directory does not exist: the temp file cannot even be created.
    let missing = dir.0.join("missing").join("x.params");
    match save(&missing, &list) {
        Err(Error::Io { path, .. }) => assert_eq!(path, missing.display().to_string()),
        other => panic!("expected Error::Io, got {other:?}"),
    }
    assert!(!dir.0.join("missing").exists());

    // The target is a directory: the temp file is written, the rename fails, the temp file goes.
    let target = dir.0.join("taken.params");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("inside"), b"keep").unwrap();
    match save(&target, &list) {
        Err(e @ Error::Io { .. }) => assert!(
            e.to_string().starts_with(&target.display().to_string()),
            "{e}"
        ),
        other => panic!("expected Error::Io, got {other:?}"),
    }
    assert_eq!(dir.names(), ["taken.params"]);
}

#[test]
fn load_of_a_missing_file_is_an_io_error_naming_it() {
    let dir = TempDir::new("missing");
    let path = dir.0.join("nope.params");
    match load(&path) {
        Err(e @ Error::Io { .. }) => assert!(e.to_string().contains("nope.params"), "{e}"),
        other => panic!("expected Error::Io, got {other:?}"),
    }
    // A file that exists but is not an NDArray file is a Format error naming it.
    std::fs::write(&path, b"not a params file").unwrap();
    let e = load(&path).unwrap_err();
    assert!(
        matches!(e, Error::Format { .. }) && e.to_string().contains("bad file magic"),
        "{e}"
    );
}
