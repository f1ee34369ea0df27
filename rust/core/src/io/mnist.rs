//! MnistIter: MNIST from IDX files (raw or gzipped), pixels scaled by 1/255, batched and
//! shuffled like [`NDArrayIter`] with `pad` for the last batch.

use super::{DataBatch, DataDesc, DataIter, LastBatchHandle, NDArrayIter, NDArrayIterOptions};
use crate::error::{Error, Result};
use crate::tensor::NDArray;
use flate2::read::MultiGzDecoder;
use std::io::Read;
use std::path::Path;

/// The magic number of an IDX file of unsigned bytes with 3 dimensions (images).
pub const IDX_IMAGES_MAGIC: u32 = 2051;
/// The magic number of an IDX file of unsigned bytes with 1 dimension (labels).
pub const IDX_LABELS_MAGIC: u32 = 2049;

/// The raw pixels of an IDX image file.
#[derive(Clone, Debug)]
pub struct IdxImages {
    /// Number of images.
    pub count: usize,
    /// Rows per image.
    pub rows: usize,
    /// Columns per image.
    pub cols: usize,
    /// `count × rows × cols` bytes, image after image, row-major.
    pub pixels: Vec<u8>,
}

/// Reads the IDX file at `path` (raw, or gzipped when it starts with the gzip magic bytes):
/// checks the header (`magic`, then `ndim` big-endian u32 sizes) first, checks the size it
/// announces against the limits policy, then inflates exactly that many bytes — a small gzip
/// file cannot inflate to more than its header announces — and checks nothing follows.
/// Returns the sizes and the payload.
fn read_idx(path: &Path, magic: u32, kind: &str) -> Result<(Vec<usize>, Vec<u8>)> {
    let shown = path.display().to_string();
    let raw = crate::limits::read_file(path)?;
    let mut stream: Box<dyn Read + '_> = if raw.starts_with(&[0x1f, 0x8b]) {
        Box::new(MultiGzDecoder::new(raw.as_slice()))
    } else {
        Box::new(raw.as_slice())
    };
    let gz_err = |e: std::io::Error| Error::format(&shown, format!("not a valid gzip file: {e}"));
    // Reads up to `n` bytes (fewer only at the end of the stream).
    let mut read_up_to = |n: u64| -> Result<Vec<u8>> {
        let mut out = Vec::new();
        stream
            .by_ref()
            .take(n)
            .read_to_end(&mut out)
            .map_err(gz_err)?;
        Ok(out)
    };
    let ndim = (magic & 0xff) as usize;
    let header = read_up_to(4 * (ndim as u64 + 1))?;
    let word = |i: usize| -> Option<u32> {
        let b = header.get(4 * i..4 * i + 4)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    let got = word(0).ok_or_else(|| {
        Error::format(
            &shown,
            format!(
                "not an IDX {kind} file: {} bytes, too short for the magic number",
                header.len()
            ),
        )
    })?;
    if got != magic {
        return Err(Error::format(
            &shown,
            format!(
                "not an IDX {kind} file: magic number {got} (0x{got:08x}), expected {magic} (0x{magic:08x})"
            ),
        ));
    }
    let dims = (1..=ndim)
        .map(|i| word(i).map(|d| d as usize))
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| {
            Error::format(
                &shown,
                format!("IDX header ends early: {ndim} sizes expected after the magic number"),
            )
        })?;
    let what = format!("IDX {kind} file \"{shown}\"");
    let want = dims
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d as u64))
        .unwrap_or(u64::MAX);
    crate::limits::check_bytes(&what, want, &format!("announced by its sizes {dims:?}"))?;
    // One byte more than announced tells a file with trailing bytes from an exact one.
    let payload = read_up_to(want + 1)?;
    if payload.len() as u64 != want {
        let has = if payload.len() as u64 > want {
            "more".to_string()
        } else {
            payload.len().to_string()
        };
        return Err(Error::format(
            &shown,
            format!("IDX sizes {dims:?} announce {want} bytes of {kind}, the file has {has}"),
        ));
    }
    Ok((dims, payload))
}

/// Reads an IDX image file (magic 2051), raw or gzipped.
pub fn read_idx_images(path: impl AsRef<Path>) -> Result<IdxImages> {
    let (dims, pixels) = read_idx(path.as_ref(), IDX_IMAGES_MAGIC, "image")?;
    Ok(IdxImages {
        count: dims[0],
        rows: dims[1],
        cols: dims[2],
        pixels,
    })
}

/// Reads an IDX label file (magic 2049), raw or gzipped.
pub fn read_idx_labels(path: impl AsRef<Path>) -> Result<Vec<u8>> {
    read_idx(path.as_ref(), IDX_LABELS_MAGIC, "label").map(|(_, labels)| labels)
}

/// Options of [`MnistIter`] (MXNet's MNISTIter defaults).
#[derive(Clone, Debug)]
pub struct MnistOptions {
    /// The IDX image file (default `./train-images-idx3-ubyte`).
    pub image: String,
    /// The IDX label file (default `./train-labels-idx1-ubyte`).
    pub label: String,
    /// Samples per batch (default 128).
    pub batch_size: usize,
    /// Reshuffle at construction and every reset (default true).
    pub shuffle: bool,
    /// Samples as `(784,)` instead of `(1, 28, 28)` (default false).
    pub flat: bool,
    /// The per-sample shape, overriding `flat` (its size must be rows × cols).
    pub input_shape: Option<Vec<usize>>,
    /// Seed of the shuffling (default 0); `None` draws from the global seed.
    pub seed: Option<u64>,
    /// Name of the data input (default `data`).
    pub data_name: String,
    /// Name of the label input (default `softmax_label`).
    pub label_name: String,
    /// Split the data into this many parts (default 1)…
    pub num_parts: usize,
    /// …and read this one (default 0).
    pub part_index: usize,
}

impl Default for MnistOptions {
    fn default() -> Self {
        MnistOptions {
            image: "./train-images-idx3-ubyte".into(),
            label: "./train-labels-idx1-ubyte".into(),
            batch_size: 128,
            shuffle: true,
            flat: false,
            input_shape: None,
            seed: Some(0),
            data_name: "data".into(),
            label_name: "softmax_label".into(),
            num_parts: 1,
            part_index: 0,
        }
    }
}

/// MNIST batches: data `(batch, 1, 28, 28)` (or `(batch, 784)` with `flat`) in [0, 1],
/// labels `(batch,)` as float32 digits; the last batch is padded like [`NDArrayIter`]'s.
pub struct MnistIter {
    inner: NDArrayIter,
    /// The number of the first image of the part read (indices count from the whole file).
    offset: usize,
}

impl MnistIter {
    /// Loads the two files and makes the iterator.
    pub fn new(opts: MnistOptions) -> Result<Self> {
        let what = "io.mnist_iter";
        super::check_batch_size(what, opts.batch_size)?;
        if opts.num_parts == 0 || opts.part_index >= opts.num_parts {
            return Err(Error::invalid(
                format!("{what}: part_index/num_parts"),
                "num_parts >= 1 and 0 <= part_index < num_parts",
                format!(
                    "part_index={}, num_parts={}",
                    opts.part_index, opts.num_parts
                ),
            ));
        }
        let images = read_idx_images(&opts.image)?;
        let labels = read_idx_labels(&opts.label)?;
        if labels.len() != images.count {
            return Err(Error::invalid(
                format!("{what}: label file {}", opts.label),
                format!("{} labels, one per image of {}", images.count, opts.image),
                format!("{} labels", labels.len()),
            ));
        }
        let pixels_per = images.rows * images.cols;
        let sample: Vec<usize> = match &opts.input_shape {
            Some(s) => {
                if s.iter().product::<usize>() != pixels_per || s.is_empty() {
                    return Err(Error::invalid(
                        format!("{what}: input_shape"),
                        format!(
                            "a per-sample shape of {pixels_per} elements ({}x{} images)",
                            images.rows, images.cols
                        ),
                        crate::error::tuple_text(&format!("{s:?}")),
                    ));
                }
                s.clone()
            }
            None if opts.flat => vec![pixels_per],
            None => vec![1, images.rows, images.cols],
        };
        // MXNet's GetPart: part p of k holds [count·p/k, count·(p+1)/k).
        let part = |p: usize| (images.count as f64 / opts.num_parts as f64 * p as f64) as usize;
        let (start, end) = (part(opts.part_index), part(opts.part_index + 1));
        let count = end - start;
        let px = &images.pixels[start * pixels_per..end * pixels_per];
        let scale = 1.0f32 / 255.0;
        let values: Vec<f32> = px.iter().map(|&p| f32::from(p) * scale).collect();
        let mut shape = vec![count];
        shape.extend_from_slice(&sample);
        let data = NDArray::from_f32(&shape, values)?;
        let lab: Vec<f32> = labels[start..end].iter().map(|&l| f32::from(l)).collect();
        let label = NDArray::from_f32(&[count], lab)?;
        let inner = NDArrayIter::new_for(
            what,
            vec![(opts.data_name.clone(), data)],
            vec![(opts.label_name.clone(), label)],
            NDArrayIterOptions {
                batch_size: opts.batch_size,
                shuffle: opts.shuffle,
                last_batch_handle: LastBatchHandle::Pad,
                seed: opts.seed,
            },
        )?;
        Ok(MnistIter {
            inner,
            offset: start,
        })
    }

    /// The number of images.
    pub fn num_data(&self) -> usize {
        self.inner.num_data()
    }
}

impl DataIter for MnistIter {
    fn provide_data(&self) -> Vec<DataDesc> {
        self.inner.provide_data()
    }
    fn provide_label(&self) -> Vec<DataDesc> {
        self.inner.provide_label()
    }
    fn batch_size(&self) -> usize {
        self.inner.batch_size()
    }
    fn reset(&mut self) -> Result<()> {
        self.inner.reset()
    }
    fn has_next(&mut self) -> Result<bool> {
        self.inner.has_next()
    }
    fn next_batch(&mut self) -> Result<Option<DataBatch>> {
        let mut b = self.inner.next_batch()?;
        if let Some(ix) = b.as_mut().and_then(|b| b.index.as_mut()) {
            ix.iter_mut().for_each(|i| *i += self.offset);
        }
        Ok(b)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use flate2::write::GzEncoder;
    use std::io::Write;

    fn idx(magic: u32, dims: &[u32], payload: &[u8]) -> Vec<u8> {
        let mut v = magic.to_be_bytes().to_vec();
        dims.iter()
            .for_each(|d| v.extend_from_slice(&d.to_be_bytes()));
        v.extend_from_slice(payload);
        v
    }

    fn gz(bytes: &[u8]) -> Vec<u8> {
        let mut e = GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    /// Writes `bytes` to a fresh file and reads it as an IDX label file.
    fn labels(tag: &str, bytes: &[u8]) -> Result<Vec<u8>> {
        let path = std::env::temp_dir().join(format!("mxfn-idx-{tag}-{}.idx", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        let got = read_idx_labels(&path);
        std::fs::remove_file(&path).unwrap();
        got
    }

    #[test]
    fn header_checks_name_the_file() {
        let good = idx(2049, &[3], &[1, 2, 3]);
        assert_eq!(labels("good", &good).unwrap(), [1, 2, 3]);
        assert_eq!(labels("goodgz", &gz(&good)).unwrap(), [1, 2, 3]);
        let e = labels("magic", &idx(2051, &[3], &[1, 2, 3])).unwrap_err();
        assert!(e.to_string().contains(".idx") && e.to_string().contains("magic number 2051"));
        let e = labels("short", &idx(2049, &[4], &[1, 2, 3])).unwrap_err();
        assert!(e.to_string().contains("announce 4 bytes") && e.to_string().contains("has 3"));
        let e = labels("long", &idx(2049, &[2], &[1, 2, 3])).unwrap_err();
        assert!(e.to_string().contains("the file has more"), "{e}");
        assert!(labels("tiny", &[0, 0]).is_err());
        assert!(labels("nohdr", &2049u32.to_be_bytes()).is_err());
    }

    #[test]
    fn a_gzip_bomb_inflates_no_further_than_its_header_announces() {
        // 200 MB of zeros compress to ~200 KB; the header announces 3 labels, so reading
        // stops after 4 bytes of payload.
        let mut bomb = idx(2049, &[3], &[]);
        bomb.resize(200 << 20, 0);
        let e = labels("bomb", &gz(&bomb)).unwrap_err();
        assert!(e.to_string().contains("the file has more"), "{e}");
    }

    #[test]
    fn an_announced_size_past_the_limit_is_refused_before_reading() {
        // Images of 2^32 × 2^32 × 2^32 bytes fit no machine.
        let path = std::env::temp_dir().join(format!("mxfn-idx-img-{}.idx", std::process::id()));
        std::fs::write(&path, idx(2051, &[u32::MAX; 3], &[])).unwrap();
        let e = read_idx_images(&path).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert!(e.to_string().contains(crate::limits::MAX_BYTES_ENV), "{e}");
    }
}
