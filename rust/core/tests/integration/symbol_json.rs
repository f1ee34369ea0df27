//! Symbol JSON against MXNet 1.9.1's own files: every recorded operator case and the checkpoint
//! symbols round-trip byte for byte, the pre-1.0 legacy files upgrade to exactly the text
//! MXNet writes after loading them, listings match the checkpoint README, and bad input gives
//! an error naming the problem (never a panic).
//!
//! Cases using operators that are not registered yet are counted and skipped (printed with
//! `--nocapture`), not failed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mxfn_core::error::Error;
use mxfn_core::ops;
use mxfn_core::symbol::json::{load, load_json, save, to_json};
use serde_json::Value;

use crate::common::conformance_dir;

fn checkpoint(name: &str) -> String {
    let p = conformance_dir().join("checkpoints").join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Operators used by a symbol JSON text that the registry does not have (yet).
fn missing_ops(text: &str) -> Vec<String> {
    let v: Value = serde_json::from_str(text).expect("conformance JSON parses");
    let mut out: Vec<String> = v["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .filter_map(|n| n["op"].as_str())
        .filter(|op| *op != "null" && ops::lookup(op).is_err())
        .map(str::to_string)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Loads `text` and checks `to_json` gives `want`; None when skipped for missing operators.
fn check_round_trip(what: &str, text: &str, want: &str) -> Option<Result<(), String>> {
    let missing = missing_ops(text);
    if !missing.is_empty() {
        println!(
            "skipped {what}: operators not registered: {}",
            missing.join(", ")
        );
        return None;
    }
    Some(match load_json(text) {
        Err(e) => Err(format!("{what}: load_json failed: {e}")),
        Ok(sym) => {
            let got = to_json(&sym);
            if got == want {
                Ok(())
            } else {
                let at = got
                    .bytes()
                    .zip(want.bytes())
                    .position(|(a, b)| a != b)
                    .unwrap_or(got.len().min(want.len()));
                let from = at.saturating_sub(60);
                let near = |s: &str| s.get(from..(at + 60).min(s.len())).unwrap_or(s).to_string();
                Err(format!(
                    "{what}: text differs at byte {at}:\n--- got\n{}\n--- want\n{}",
                    near(&got),
                    near(want)
                ))
            }
        }
    })
}

#[test]
fn operator_cases_round_trip_byte_for_byte() {
    let path = conformance_dir().join("ops/cases.json");
    let cases: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("cases.json")).unwrap();
    let cases = cases.as_array().expect("a list of cases");
    let (mut passed, mut skipped, mut failures) = (0, 0, Vec::new());
    for case in cases {
        let id = case["id"].as_str().unwrap();
        let text = case["symbol"].as_str().unwrap();
        match check_round_trip(id, text, text) {
            None => skipped += 1,
            Some(Ok(())) => passed += 1,
            Some(Err(e)) => failures.push(e),
        }
    }
    println!(
        "operator cases: {passed} round-tripped, {skipped} skipped (operators not registered), \
         {} failed, of {}",
        failures.len(),
        cases.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert_eq!(passed + skipped, cases.len());
}

#[test]
fn checkpoint_symbols_round_trip_byte_for_byte() {
    let (mut passed, mut skipped, mut failures) = (0, 0, Vec::new());
    for name in ["mlp", "lenet", "bnnet"] {
        let file = format!("{name}-symbol.json");
        let text = checkpoint(&file);
        match check_round_trip(&file, &text, &text) {
            None => skipped += 1,
            Some(Ok(())) => passed += 1,
            Some(Err(e)) => failures.push(e),
        }
    }
    println!("checkpoint symbols: {passed} round-tripped, {skipped} skipped");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn legacy_symbols_upgrade_to_mxnet_text() {
    let (mut passed, mut skipped, mut failures) = (0, 0, Vec::new());
    for name in ["legacy_v0800", "legacy_v0903"] {
        let legacy = checkpoint(&format!("{name}-symbol.json"));
        let upgraded = checkpoint(&format!("{name}-upgraded.json"));
        for (what, text) in [
            (format!("{name}-symbol.json"), &legacy),
            (format!("{name}-upgraded.json"), &upgraded),
        ] {
            match check_round_trip(&what, text, &upgraded) {
                None => skipped += 1,
                Some(Ok(())) => passed += 1,
                Some(Err(e)) => failures.push(e),
            }
        }
    }
    println!("legacy symbols: {passed} upgraded to MXNet's text, {skipped} skipped");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// README.md's table (and manifest.json for the lists the README abbreviates).
#[test]
fn listings_match_the_checkpoint_readme() {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let manifest: Value = serde_json::from_str(&checkpoint("manifest.json")).unwrap();
    let from_manifest = |name: &str, key: &str| -> Vec<String> {
        let all = manifest["models"]
            .as_array()
            .unwrap()
            .iter()
            .chain(manifest["legacy_symbols"].as_array().unwrap());
        let m = all
            .into_iter()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("{name} not in manifest"));
        m[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect()
    };
    // (file, arguments README lists (a prefix when it abbreviates), total, aux, outputs)
    let table: Vec<(&str, Vec<String>, usize, Vec<String>, Vec<String>)> = vec![
        (
            "mlp",
            s(&[
                "data",
                "fc1_weight",
                "fc1_bias",
                "fc2_weight",
                "fc2_bias",
                "fc3_weight",
                "fc3_bias",
                "softmax_label",
            ]),
            8,
            vec![],
            s(&["softmax_output"]),
        ),
        (
            "lenet",
            s(&["data", "conv1_weight", "conv1_bias", "conv2_weight"]),
            10,
            vec![],
            s(&["softmax_output"]),
        ),
        (
            "bnnet",
            s(&["data", "conv1_weight", "conv1_bias", "bn1_gamma"]),
            12,
            s(&[
                "bn1_moving_mean",
                "bn1_moving_var",
                "bn2_moving_mean",
                "bn2_moving_var",
            ]),
            s(&["softmax_output"]),
        ),
        (
            "legacy_v0800",
            s(&[
                "data",
                "fc1_weight",
                "fc1_bias",
                "bn1_gamma",
                "bn1_beta",
                "fc2_weight",
                "fc2_bias",
                "softmax_label",
            ]),
            8,
            s(&["bn1_moving_mean", "bn1_moving_var"]),
            s(&["softmax_output"]),
        ),
        (
            "legacy_v0903",
            s(&[
                "data",
                "fc1_weight",
                "fc1_bias",
                "bn_gamma",
                "bn_beta",
                "fc2_weight",
                "fc2_bias",
                "softmax_label",
            ]),
            8,
            s(&["bn_moving_mean", "bn_moving_var"]),
            s(&["softmax_output", "pred_output"]),
        ),
    ];
    let (mut checked, mut skipped) = (0, 0);
    for (name, args, n_args, aux, outs) in table {
        let mut files = vec![format!("{name}-symbol.json")];
        if name.starts_with("legacy") {
            files.push(format!("{name}-upgraded.json"));
        }
        for file in files {
            let text = checkpoint(&file);
            let missing = missing_ops(&text);
            if !missing.is_empty() {
                println!(
                    "skipped {file}: operators not registered: {}",
                    missing.join(", ")
                );
                skipped += 1;
                continue;
            }
            let sym = load_json(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
            let got = sym.list_arguments();
            assert_eq!(got.len(), n_args, "{file}: {got:?}");
            assert_eq!(got[..args.len()], args[..], "{file}");
            assert_eq!(got, from_manifest(name, "arguments"), "{file}");
            assert_eq!(sym.list_auxiliary_states(), aux, "{file}");
            assert_eq!(
                sym.list_auxiliary_states(),
                from_manifest(name, "auxiliary_states"),
                "{file}"
            );
            assert_eq!(sym.list_outputs(), outs, "{file}");
            checked += 1;
        }
    }
    println!("listings: {checked} files checked, {skipped} skipped");
}

#[test]
fn save_writes_to_json_and_load_reads_it_back() {
    let data = mxfn_core::Symbol::variable("data");
    let sym = mxfn_core::Symbol::create(
        "FullyConnected",
        Some("fc1"),
        &[("num_hidden", "7")],
        vec![(None, data)],
    )
    .unwrap();
    let dir = std::env::temp_dir().join(format!("mxfn-symbol-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("net-symbol.json");
    save(&sym, &path).unwrap();
    // Saving again replaces the file.
    save(&sym, &path).unwrap();
    let bytes = std::fs::read_to_string(&path).unwrap();
    assert_eq!(bytes, to_json(&sym));
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("net-symbol.json")]);
    let back = load(&path).unwrap();
    assert_eq!(to_json(&back), bytes);
    assert_eq!(
        back.list_arguments(),
        vec!["data", "fc1_weight", "fc1_bias"]
    );

    // Errors: a missing file is an I/O error naming it, bad content a format error naming it.
    let missing = dir.join("nope-symbol.json");
    match load(&missing) {
        Err(Error::Io { path, .. }) => assert!(path.contains("nope-symbol.json")),
        other => panic!("expected an Io error, got {other:?}"),
    }
    std::fs::write(&path, "{\"nodes\": 3}").unwrap();
    match load(&path) {
        Err(Error::Format { path, msg }) => {
            assert!(path.contains("net-symbol.json"), "{path}");
            assert!(msg.contains("\"nodes\" is not a list"), "{msg}");
        }
        other => panic!("expected a Format error, got {other:?}"),
    }
    assert!(save(&sym, dir.join("no/such/dir/x.json")).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_input_is_an_error_naming_the_problem() {
    let var = r#"{"op": "null", "name": "x", "inputs": []}"#;
    let cases: Vec<(String, &str)> = vec![
        ("{\"nodes\": [".into(), "not valid JSON"),
        ("".into(), "not valid JSON"),
        ("42".into(), "not an object"),
        ("{\"heads\": []}".into(), "no \"nodes\" list"),
        (format!("{{\"nodes\": [{var}]}}"), "no \"heads\" list"),
        (
            r#"{"nodes": [{"op": "null", "inputs": []}], "heads": []}"#.into(),
            "node 0: no \"name\"",
        ),
        (
            r#"{"nodes": [{"name": "y", "inputs": []}], "heads": []}"#.into(),
            "node 0: no \"op\"",
        ),
        (
            format!(r#"{{"nodes": [{var}, {{"op": "null", "name": "y"}}], "heads": []}}"#),
            "node 1 (y): no \"inputs\" list",
        ),
        (
            format!(
                r#"{{"nodes": [{var}, {{"op": "relu", "name": "r", "inputs": [[2, 0, 0]]}},
                    {var}], "heads": [[1, 0, 0]]}}"#
            ),
            "node 1 (r): input 0 refers to node 2, which does not come before it",
        ),
        (
            format!(
                r#"{{"nodes": [{var}, {{"op": "relu", "name": "r", "inputs": [[0, 0, -1]]}}],
                    "heads": [[1, 0, 0]]}}"#
            ),
            "node 1 (r): input 0",
        ),
        (
            format!(
                r#"{{"nodes": [{var}, {{"op": "NoSuchOp", "name": "n1", "inputs": [[0, 0, 0]]}}],
                    "heads": [[1, 0, 0]]}}"#
            ),
            "node 1 (n1): unknown operator \"NoSuchOp\"",
        ),
        (
            format!(
                r#"{{"nodes": [{var}, {{"op": "Activation", "name": "a", "inputs": [[0, 0, 0]],
                    "attrs": {{"act_type": "nope"}}}}], "heads": [[1, 0, 0]]}}"#
            ),
            "node 1 (a)",
        ),
        (
            format!(r#"{{"nodes": [{var}], "heads": [[1, 0, 0]]}}"#),
            "head 0 refers to node 1",
        ),
        (
            format!(
                r#"{{"nodes": [{var}], "heads": [[0, 0, 0]], "attrs": {{"mxnet_version": "x"}}}}"#
            ),
            "mxnet_version",
        ),
    ];
    for (text, want) in &cases {
        match load_json(text) {
            Ok(_) => panic!("loaded: {text}"),
            Err(e) => assert!(
                e.to_string().contains(want),
                "{e}\n  should contain: {want}"
            ),
        }
    }
    // An unknown operator keeps its NotFound kind under the added node context.
    let e = load_json(cases[10].0.as_str()).unwrap_err();
    assert!(matches!(e.root(), Error::NotFound { .. }), "{e:?}");
    // Structural problems are format errors.
    let e = load_json(cases[8].0.as_str()).unwrap_err();
    assert!(matches!(e, Error::Format { .. }), "{e:?}");
}

/// Truncated and mutated files never panic.
#[test]
fn damaged_files_never_panic() {
    let text = checkpoint("legacy_v0800-symbol.json");
    for cut in (0..text.len()).step_by(7) {
        if text.is_char_boundary(cut) {
            let _ = load_json(&text[..cut]);
        }
    }
    let bytes = text.as_bytes();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..2000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let mut b = bytes.to_vec();
        let at = (seed % b.len() as u64) as usize;
        b[at] = b"0123456789[]{},\" -x"[(seed >> 32) as usize % 19];
        if let Ok(t) = std::str::from_utf8(&b) {
            let _ = load_json(t);
        }
    }
}

/// Dropping a graph does not recurse per node: a 200k-node chain would overflow the test
/// thread's stack otherwise.
#[test]
fn dropping_a_deep_chain_does_not_overflow_the_stack() {
    use mxfn_core::symbol::Symbol;
    let mut s = Symbol::variable("x");
    for _ in 0..200_000 {
        s = Symbol::create("_plus_scalar", None, &[("scalar", "1")], vec![(None, s)]).unwrap();
    }
    drop(s);
}

/// A variadic operator's `num_args` is bounded before anything is sized by it: a 183-byte file
/// asking `Concat` for 10⁸ inputs used to build 10⁸ input names (gigabytes) before failing.
#[test]
fn a_huge_num_args_is_refused_before_allocating() {
    let text = r#"{"nodes":[{"op":"null","name":"a","inputs":[]},{"op":"Concat","name":"c","attrs":{"num_args":"100000000","dim":"1"},"inputs":[[0,0,0]]}],"arg_nodes":[0],"heads":[[1,0,0]]}"#;
    let err = load_json(text).unwrap_err().to_string();
    assert!(
        err.contains("num_args") && err.contains("MAX_NUM_ARGS") && err.contains("100000000"),
        "{err}"
    );
}
