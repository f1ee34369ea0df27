//! Data iterators end to end: NDArrayIter's last-batch modes and shuffling, MNIST from the
//! shipped IDX files, CSV round_batch, bucketing, and the errors bad input gets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mxfn_core::io::{
    name_arrays, BucketSentenceIter, BucketSentenceOptions, CsvIter, CsvOptions, DataIter,
    LastBatchHandle, MnistIter, MnistOptions, NDArrayIter, NDArrayIterOptions,
};
use mxfn_core::{DType, NDArray};
use std::path::PathBuf;

fn range(n: usize) -> NDArray {
    NDArray::arange(0.0, n as f64, 1.0, DType::Float32).unwrap()
}

fn iter(
    n: usize,
    bs: usize,
    mode: LastBatchHandle,
    shuffle: bool,
    seed: Option<u64>,
) -> NDArrayIter {
    let opts = NDArrayIterOptions {
        batch_size: bs,
        shuffle,
        last_batch_handle: mode,
        seed,
    };
    NDArrayIter::new(
        vec![("data".into(), range(n).reshape(&[n as isize, 1]).unwrap())],
        vec![("softmax_label".into(), range(n))],
        opts,
    )
    .unwrap()
}

/// (data values, pad) of every batch of the rest of the epoch; checks label == data.
fn epoch(it: &mut impl DataIter) -> Vec<(Vec<f64>, usize)> {
    it.epoch()
        .map(|b| {
            let b = b.unwrap();
            let d = b.data[0].to_f64_vec();
            assert_eq!(d, b.label[0].to_f64_vec());
            (d, b.pad)
        })
        .collect()
}

fn v(xs: &[usize]) -> Vec<f64> {
    xs.iter().map(|&x| x as f64).collect()
}

#[test]
fn last_batch_modes_match_mxnet() {
    let mut pad = iter(10, 4, LastBatchHandle::Pad, false, None);
    assert_eq!(
        epoch(&mut pad),
        vec![
            (v(&[0, 1, 2, 3]), 0),
            (v(&[4, 5, 6, 7]), 0),
            (v(&[8, 9, 0, 1]), 2)
        ]
    );
    let mut discard = iter(10, 4, LastBatchHandle::Discard, false, None);
    assert_eq!(epoch(&mut discard).len(), 2);
    discard.reset().unwrap();
    assert_eq!(epoch(&mut discard)[0], (v(&[0, 1, 2, 3]), 0));

    // Recorded from MXNet 1.9.1: NDArrayIter(arange(10), batch_size=3, 'roll_over').
    let mut roll = iter(10, 3, LastBatchHandle::RollOver, false, None);
    let want = [
        vec![(v(&[0, 1, 2]), 0), (v(&[3, 4, 5]), 0), (v(&[6, 7, 8]), 0)],
        vec![(v(&[9, 0, 1]), 1), (v(&[2, 3, 4]), 0), (v(&[5, 6, 7]), 0)],
        vec![
            (v(&[8, 9, 0]), 2),
            (v(&[1, 2, 3]), 0),
            (v(&[4, 5, 6]), 0),
            (v(&[7, 8, 9]), 0),
        ],
    ];
    for w in want {
        assert_eq!(epoch(&mut roll), w);
        roll.reset().unwrap();
    }
}

#[test]
fn shuffling_is_seeded_and_redrawn_at_reset() {
    let mut a = iter(20, 5, LastBatchHandle::Pad, true, Some(7));
    let mut b = iter(20, 5, LastBatchHandle::Pad, true, Some(7));
    let ea = epoch(&mut a);
    assert_eq!(ea, epoch(&mut b));
    let mut seen: Vec<f64> = ea.iter().flat_map(|(d, _)| d.clone()).collect();
    assert_ne!(seen, v(&(0..20).collect::<Vec<_>>()));
    seen.sort_by(|x, y| x.partial_cmp(y).unwrap());
    assert_eq!(seen, v(&(0..20).collect::<Vec<_>>()));
    a.reset().unwrap();
    assert_ne!(epoch(&mut a), ea);
}

#[test]
fn list_naming_and_length_errors() {
    let named = name_arrays(vec![range(4), range(4)], "data");
    let it = NDArrayIter::new(named, vec![], NDArrayIterOptions::default()).unwrap();
    let names: Vec<String> = it.provide_data().into_iter().map(|d| d.name).collect();
    assert_eq!(names, vec!["_0_data", "_1_data"]);
    assert_eq!(it.provide_data()[0].shape, vec![1]);
    assert!(it.provide_label().is_empty());

    let err = |data: Vec<(String, NDArray)>, label: Vec<(String, NDArray)>, bs: usize| {
        let opts = NDArrayIterOptions {
            batch_size: bs,
            ..Default::default()
        };
        NDArrayIter::new(data, label, opts)
            .err()
            .unwrap()
            .to_string()
    };
    let e = err(
        vec![("data".into(), range(4))],
        vec![("softmax_label".into(), range(3))],
        1,
    );
    assert!(
        e.contains("softmax_label") && e.contains("3 samples"),
        "{e}"
    );
    assert!(err(vec![("data".into(), range(4))], vec![], 0).contains("batch_size"));
    assert!(err(vec![], vec![], 1).contains("empty"));
    assert!(err(vec![("data".into(), range(0))], vec![], 1).contains("empty"));
}

fn mnist_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/mnist")
}

#[test]
fn mnist_from_the_shipped_gz_files() {
    let d = mnist_dir();
    let opts = MnistOptions {
        image: d.join("t10k-images-idx3-ubyte.gz").display().to_string(),
        label: d.join("t10k-labels-idx1-ubyte.gz").display().to_string(),
        batch_size: 1000,
        shuffle: false,
        flat: true,
        ..Default::default()
    };
    let mut it = MnistIter::new(opts).unwrap();
    assert_eq!(it.num_data(), 10000);
    assert_eq!(it.provide_data()[0].shape, vec![1000, 784]);
    assert_eq!(it.provide_label()[0].shape, vec![1000]);
    let b = it.next_batch().unwrap().unwrap();
    assert_eq!(&b.label[0].to_f64_vec()[..5], &[7.0, 2.0, 1.0, 0.0, 4.0]);
    let px = b.data[0].to_f64_vec();
    let max = px.iter().cloned().fold(0.0, f64::max);
    assert!((max - 1.0).abs() < 1e-6 && px.iter().all(|&p| p >= 0.0));
    assert_eq!(it.epoch().count(), 9);
}

#[test]
fn mnist_rejects_wrong_magic_naming_the_file() {
    let dir = std::env::temp_dir().join(format!("mxfn-io-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let img = dir.join("bad-images");
    let mut bytes = 2049u32.to_be_bytes().to_vec();
    bytes.extend_from_slice(&[0, 0, 0, 1, 1, 2]);
    std::fs::write(&img, bytes).unwrap();
    let opts = MnistOptions {
        image: img.display().to_string(),
        label: img.display().to_string(),
        ..Default::default()
    };
    let e = MnistIter::new(opts).err().unwrap().to_string();
    assert!(e.contains("bad-images") && e.contains("2051"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn csv_round_batch_matches_mxnet() {
    let dir = std::env::temp_dir().join(format!("mxfn-csv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("d.csv");
    std::fs::write(&f, "1,2,3\n2,3,4\n3,4,5\n4,5,6\n5,6,7\n").unwrap();
    let mk = |round_batch| {
        CsvIter::new(CsvOptions {
            data_csv: f.display().to_string(),
            data_shape: vec![3],
            batch_size: 3,
            round_batch,
            ..Default::default()
        })
        .unwrap()
    };
    let firsts = |it: &mut CsvIter| -> Vec<(Vec<f64>, usize)> {
        it.epoch()
            .map(|b| {
                let b = b.unwrap();
                assert_eq!(b.label[0].shape(), &[3]);
                let d = b.data[0].to_f64_vec();
                (d.chunks(3).map(|r| r[0]).collect(), b.pad)
            })
            .collect()
    };
    // Recorded from MXNet 1.9.1's CSVIter on the same file.
    let mut it = mk(true);
    assert_eq!(
        firsts(&mut it),
        vec![(vec![1.0, 2.0, 3.0], 0), (vec![4.0, 5.0, 1.0], 1)]
    );
    it.reset().unwrap();
    assert_eq!(
        firsts(&mut it),
        vec![(vec![2.0, 3.0, 4.0], 0), (vec![5.0, 1.0, 2.0], 2)]
    );
    it.reset().unwrap();
    assert_eq!(firsts(&mut it), vec![(vec![3.0, 4.0, 5.0], 0)]);
    let mut it = mk(false);
    assert_eq!(
        firsts(&mut it),
        vec![(vec![1.0, 2.0, 3.0], 0), (vec![4.0, 5.0, 3.0], 1)]
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bucket_keys_shapes_and_layout() {
    let sentences: Vec<Vec<f64>> = (0..40).map(|i| vec![1.0; 1 + i % 8]).collect();
    let opts = BucketSentenceOptions {
        buckets: vec![4, 8],
        layout: "TN".into(),
        seed: Some(0),
        ..Default::default()
    };
    let mut it = BucketSentenceIter::new(&sentences, 5, opts).unwrap();
    assert_eq!(it.default_bucket_key(), Some(8));
    assert_eq!(it.provide_data()[0].shape, vec![8, 5]);
    let mut keys = Vec::new();
    for b in it.epoch() {
        let b = b.unwrap();
        let key = b.bucket_key.unwrap();
        assert_eq!(b.data[0].shape(), &[key, 5]);
        assert_eq!(b.provide_data.as_ref().unwrap()[0].shape, vec![key, 5]);
        keys.push(key);
    }
    keys.sort_unstable();
    assert_eq!(keys, vec![4, 4, 4, 4, 8, 8, 8, 8]);
}
