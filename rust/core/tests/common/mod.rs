//! Helpers the integration tests share: where the MXNet 1.9.1 reference data lives and how
//! to read its `.npz` files.
#![allow(dead_code)] // each test crate uses its own subset

use mxfn_core::NDArray;
use ndarray_npy::NpzReader;
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

/// The conformance data copied into the repository (`MXFN_CONFORMANCE_DIR` overrides).
pub fn conformance_dir() -> PathBuf {
    if let Ok(d) = std::env::var("MXFN_CONFORMANCE_DIR") {
        return PathBuf::from(d);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/conformance")
}

/// Every float32 array of an `.npz` file, by name (without `.npy`).
pub fn read_npz(path: &Path) -> HashMap<String, NDArray> {
    let mut npz = NpzReader::new(File::open(path).unwrap()).unwrap();
    let mut out = HashMap::new();
    for n in npz.names().unwrap() {
        let a = npz
            .by_name::<ndarray::OwnedRepr<f32>, ndarray::IxDyn>(&n)
            .unwrap();
        out.insert(
            n.trim_end_matches(".npy").to_string(),
            NDArray::from_array(a),
        );
    }
    out
}

/// `got` matches `want` elementwise within `atol + rtol·|want|`.
pub fn assert_close(what: &str, got: &NDArray, want: &NDArray, rtol: f64, atol: f64) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    for (i, (g, w)) in got.to_f64_vec().iter().zip(want.to_f64_vec()).enumerate() {
        assert!(
            (g - w).abs() <= atol + rtol * w.abs(),
            "{what}[{i}]: {g}, expected {w}"
        );
    }
}
