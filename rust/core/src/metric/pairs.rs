//! The per-(label, prediction) computations of each metric kind, reading any dtype as f64.

use super::*;
use crate::kernels::map::{axis_dims, broadcast_strides};

/// An array's values read as f64: float32 and float64 storage is read in place (no copy);
/// other dtypes are converted once.
pub(super) enum Vals<'a> {
    F32(&'a [f32]),
    F64(Cow<'a, [f64]>),
}

impl Vals<'_> {
    #[inline]
    pub(super) fn at(&self, i: usize) -> f64 {
        match self {
            Vals::F32(x) => f64::from(x[i]),
            Vals::F64(x) => x[i],
        }
    }

    pub(super) fn len(&self) -> usize {
        match self {
            Vals::F32(x) => x.len(),
            Vals::F64(x) => x.len(),
        }
    }

    /// All values as one f64 slice (converting float32 in parallel).
    pub(super) fn to_f64(&self) -> Cow<'_, [f64]> {
        match self {
            Vals::F32(x) => Cow::Owned(conv(x)),
            Vals::F64(x) => Cow::Borrowed(x),
        }
    }
}

pub(super) fn conv<T: Element>(x: &[T]) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    crate::kernels::par::for_each_chunk_mut(&mut out, |start, chunk| {
        for (o, v) in chunk.iter_mut().zip(&x[start..]) {
            *o = v.to_f64();
        }
    });
    out
}

pub(super) fn f64s(a: &NDArray) -> Vals<'_> {
    if let Some(s) = a.typed::<f32>().and_then(|x| x.as_slice()) {
        return Vals::F32(s);
    }
    if let Some(s) = a.typed::<f64>().and_then(|x| x.as_slice()) {
        return Vals::F64(Cow::Borrowed(s));
    }
    Vals::F64(Cow::Owned(with_data!(a.data(), x => match x.as_slice() {
        Some(s) => conv(s),
        None => x.iter().map(|v| v.to_f64()).collect(),
    })))
}

/// numpy's `astype('int32')` of a float: truncation toward zero (NaN → INT_MIN as on x86).
pub(super) fn as_i32(v: f64) -> i64 {
    if v.is_nan() {
        i64::from(i32::MIN)
    } else {
        i64::from(v as i32)
    }
}

/// Σ f(i) for i in 0..n, in fixed chunks combined in order: the same bits at any thread count.
pub(super) fn ordered_sum(n: usize, f: impl Fn(usize) -> f64 + Sync) -> f64 {
    let chunks = n.div_ceil(CHUNK);
    let part = |c: usize| (c * CHUNK..((c + 1) * CHUNK).min(n)).map(&f).sum::<f64>();
    let parts: Vec<f64> = if n < SERIAL_BELOW {
        (0..chunks).map(part).collect()
    } else {
        (0..chunks).into_par_iter().map(part).collect()
    };
    parts.iter().sum()
}

/// How many i in 0..n satisfy `f` (in parallel when n is large).
pub(super) fn count(n: usize, f: impl Fn(usize) -> bool + Sync) -> usize {
    if n < SERIAL_BELOW {
        (0..n).filter(|&i| f(i)).count()
    } else {
        (0..n).into_par_iter().filter(|&i| f(i)).count()
    }
}

/// `(outer, n, inner)`: the sizes before, at and after `axis`.
/// Argmax along `axis` (first maximum wins; a NaN wins as numpy's argmax), in output order.
pub(super) fn argmax_axis(
    what: &str,
    x: &Vals<'_>,
    shape: &[usize],
    axis: usize,
) -> Result<Vec<i64>> {
    let (outer, n, inner) = axis_dims(shape, axis);
    if n == 0 {
        return Err(Error::invalid(
            format!("{what}: prediction"),
            "a non-empty class axis",
            format!("shape {}", crate::error::tuple_text(&format!("{shape:?}"))),
        ));
    }
    let f = |j: usize| {
        let (o, i) = (j / inner, j % inner);
        let base = o * n * inner + i;
        let mut best = 0usize;
        let mut bv = x.at(base);
        if !bv.is_nan() {
            for k in 1..n {
                let v = x.at(base + k * inner);
                if v.is_nan() {
                    best = k;
                    break;
                }
                if v > bv {
                    best = k;
                    bv = v;
                }
            }
        }
        best as i64
    };
    let m = outer * inner;
    Ok(if x.len() < SERIAL_BELOW {
        (0..m).map(f).collect()
    } else {
        (0..m).into_par_iter().map(f).collect()
    })
}

/// numpy's `astype('int32')` of every value.
pub(super) fn ints(v: &Vals<'_>) -> Vec<i64> {
    (0..v.len()).map(|i| as_i32(v.at(i))).collect()
}

pub(super) fn shape_text(s: &[usize]) -> String {
    crate::error::tuple_text(&format!("{s:?}"))
}

pub(super) fn accuracy_pair(
    name: &str,
    l: &NDArray,
    p: &NDArray,
    axis: isize,
) -> Result<(f64, f64)> {
    let what = format!("{name}.update");
    let lv = f64s(l);
    let pv = f64s(p);
    let correct = if p.shape() != l.shape() {
        if p.ndim() == 0 {
            return Err(Error::shape(what, "prediction", l.shape(), p.shape()));
        }
        let ax = norm_axis(&format!("{what}: axis"), axis, p.ndim())?;
        let idx = argmax_axis(&what, &pv, p.shape(), ax)?;
        if idx.len() != lv.len() {
            return Err(Error::invalid(
                format!("{what}: labels"),
                format!(
                    "{} values (prediction {} reduced over axis {axis})",
                    idx.len(),
                    shape_text(p.shape())
                ),
                format!("{} values (shape {})", lv.len(), shape_text(l.shape())),
            ));
        }
        count(idx.len(), |i| idx[i] == as_i32(lv.at(i)))
    } else {
        count(lv.len(), |i| as_i32(pv.at(i)) == as_i32(lv.at(i)))
    };
    Ok((correct as f64, lv.len() as f64))
}

pub(super) fn top_k_pair(name: &str, l: &NDArray, p: &NDArray, k: usize) -> Result<(f64, f64)> {
    let what = format!("{name}.update");
    if p.ndim() != 2 {
        return Err(Error::invalid(
            format!("{what}: prediction"),
            "a 2-D (batch, classes) array",
            format!("shape {}", shape_text(p.shape())),
        ));
    }
    let (n, c) = (p.shape()[0], p.shape()[1]);
    if l.size() != n {
        return Err(Error::invalid(
            format!("{what}: labels"),
            format!("{n} values, one per prediction row"),
            format!("shape {}", shape_text(l.shape())),
        ));
    }
    let top = k.min(c);
    let (lv, pv) = (f64s(l), f64s(p));
    let right = count(n, |r| {
        let lab = as_i32(lv.at(r));
        if lab < 0 || lab as usize >= c {
            return false;
        }
        let v = pv.at(r * c + lab as usize);
        (0..c).filter(|&j| pv.at(r * c + j) > v).count() < top
    });
    Ok((right as f64, n as f64))
}

pub(super) fn binary_pair(name: &str, l: &NDArray, p: &NDArray) -> Result<Binary> {
    let what = format!("{name}.update");
    if p.ndim() != 2 {
        return Err(Error::invalid(
            format!("{what}: prediction"),
            "a 2-D (batch, classes) array",
            format!("shape {}", shape_text(p.shape())),
        ));
    }
    let n = p.shape()[0];
    if l.size() != n {
        return Err(Error::invalid(
            format!("{what}: labels"),
            format!("{n} values, one per prediction row"),
            format!("shape {}", shape_text(l.shape())),
        ));
    }
    let lv = ints(&f64s(l));
    let mut distinct: Vec<i64> = Vec::new();
    for &v in &lv {
        if !distinct.contains(&v) {
            distinct.push(v);
            if distinct.len() > 2 {
                return Err(Error::invalid(
                    format!("{what}: labels"),
                    format!("at most two classes ({name} supports binary classification only)"),
                    format!("the classes {distinct:?}"),
                ));
            }
        }
    }
    let pred = argmax_axis(&what, &f64s(p), p.shape(), 1)?;
    let mut b = Binary::default();
    for (&pl, &ll) in pred.iter().zip(&lv) {
        match (pl == 1, ll == 1) {
            (true, true) => b.tp += 1.0,
            (true, false) => b.fp += 1.0,
            (false, true) => b.fn_ += 1.0,
            (false, false) => b.tn += 1.0,
        }
    }
    Ok(b)
}

pub(super) fn perplexity_pair(
    name: &str,
    l: &NDArray,
    p: &NDArray,
    ignore: Option<f64>,
    axis: isize,
) -> Result<(f64, f64)> {
    let what = format!("{name}.update");
    if p.ndim() == 0 {
        return Err(Error::shape(what, "prediction", l.shape(), p.shape()));
    }
    let ax = norm_axis(&format!("{what}: axis"), axis, p.ndim())?;
    let (outer, c, inner) = axis_dims(p.shape(), ax);
    let m = outer * inner;
    if l.size() != m || c == 0 {
        return Err(Error::invalid(
            format!("{what}: labels"),
            format!(
                "{m} values (one per prediction position, prediction {})",
                shape_text(p.shape())
            ),
            format!("shape {}", shape_text(l.shape())),
        ));
    }
    let (lv, pv) = (f64s(l), f64s(p));
    let ignored = |j: usize| ignore.is_some_and(|v| lv.at(j) == v);
    let loss = ordered_sum(m, |j| {
        if ignored(j) {
            return 0.0;
        }
        // ndarray.pick's default mode clips the index into [0, classes).
        let k = as_i32(lv.at(j)).clamp(0, c as i64 - 1) as usize;
        let (o, i) = (j / inner, j % inner);
        -pv.at(o * c * inner + k * inner + i).max(1e-10).ln()
    });
    let kept = m - count(m, ignored);
    Ok((loss, kept as f64))
}

pub(super) fn regression_pair(name: &str, which: &str, l: &NDArray, p: &NDArray) -> Result<f64> {
    // MXNet reshapes a 1-D array to (n, 1) before the (numpy-broadcast) difference.
    let col = |a: &NDArray| -> Vec<usize> {
        if a.ndim() == 1 {
            vec![a.shape()[0], 1]
        } else {
            a.shape().to_vec()
        }
    };
    let (ls, ps) = (col(l), col(p));
    let (lv, pv) = (f64s(l), f64s(p));
    let term = |d: f64| if which == "mae" { d.abs() } else { d * d };
    let (total, n) = if ls == ps {
        (
            ordered_sum(lv.len(), |i| term(lv.at(i) - pv.at(i))),
            lv.len(),
        )
    } else {
        let out = crate::tensor::arith::broadcast_shape(&format!("{name}.update"), &ls, &ps)?;
        let (sl, sp) = (broadcast_strides(&ls, &out), broadcast_strides(&ps, &out));
        let n: usize = out.iter().product();
        let total = ordered_sum(n, |j| {
            let (mut rem, mut il, mut ip) = (j, 0, 0);
            for d in (0..out.len()).rev() {
                let k = rem % out[d];
                rem /= out[d];
                il += k * sl[d];
                ip += k * sp[d];
            }
            term(lv.at(il) - pv.at(ip))
        });
        (total, n)
    };
    // An empty pair gives NaN, as numpy's mean of nothing.
    let mean = total / n as f64;
    Ok(if which == "rmse" { mean.sqrt() } else { mean })
}

pub(super) fn log_loss_pair(name: &str, l: &NDArray, p: &NDArray, eps: f64) -> Result<(f64, f64)> {
    let what = format!("{name}.update");
    if p.ndim() != 2 {
        return Err(Error::invalid(
            format!("{what}: prediction"),
            "a 2-D (batch, classes) array",
            format!("shape {}", shape_text(p.shape())),
        ));
    }
    let (n, c) = (p.shape()[0], p.shape()[1]);
    if l.size() != n {
        return Err(Error::invalid(
            format!("{what}: labels"),
            format!("{n} values, one per prediction row"),
            format!("shape {}", shape_text(l.shape())),
        ));
    }
    let (lv, pv) = (f64s(l), f64s(p));
    // numpy indexing: the label truncated to int64, negative values counting from the end.
    let mut idx = Vec::with_capacity(n);
    for r in 0..n {
        let v = lv.at(r);
        let t = v.trunc();
        let k = if t < 0.0 { t + c as f64 } else { t };
        if !(k >= 0.0 && k < c as f64) {
            return Err(Error::invalid(
                format!("{what}: labels"),
                format!("class indices in [0, {c})"),
                v.to_string(),
            ));
        }
        idx.push(k as usize);
    }
    // MXNet adds eps, takes the log and sums in the prediction's dtype (float32 for float32
    // predictions); mxfn sums the float32 terms in f64 and rounds the total to float32.
    let f32_math = p.dtype() != DType::Float64;
    let loss = ordered_sum(n, |r| {
        let prob = pv.at(r * c + idx[r]);
        if f32_math {
            -f64::from((prob as f32 + eps as f32).ln())
        } else {
            -(prob + eps).ln()
        }
    });
    let loss = if f32_math {
        f64::from(loss as f32)
    } else {
        loss
    };
    Ok((loss, n as f64))
}

/// numpy's `corrcoef(pred, label)[0, 1]`: covariance over the product of deviations, clipped
/// to [-1, 1]; NaN for a constant input or a single sample.
pub(super) fn corrcoef(p: &[f64], l: &[f64]) -> f64 {
    let n = p.len();
    let mp = ordered_sum(n, |i| p[i]) / n as f64;
    let ml = ordered_sum(n, |i| l[i]) / n as f64;
    let d = n as f64 - 1.0;
    let cpl = ordered_sum(n, |i| (p[i] - mp) * (l[i] - ml)) / d;
    let cpp = ordered_sum(n, |i| (p[i] - mp) * (p[i] - mp)) / d;
    let cll = ordered_sum(n, |i| (l[i] - ml) * (l[i] - ml)) / d;
    let r = cpl / cpp.sqrt() / cll.sqrt();
    if r.is_nan() {
        r
    } else {
        r.clamp(-1.0, 1.0)
    }
}

pub(super) fn pcc_pair(name: &str, l: &NDArray, p: &NDArray, cm: &mut Confusion) -> Result<()> {
    let what = format!("{name}.update");
    let lv = ints(&f64s(l));
    let pv: Vec<i64> = if p.shape() != l.shape() {
        if p.ndim() < 2 {
            return Err(Error::shape(what, "prediction", l.shape(), p.shape()));
        }
        argmax_axis(&what, &f64s(p), p.shape(), 1)?
    } else {
        ints(&f64s(p))
    };
    if pv.len() != lv.len() {
        return Err(Error::invalid(
            format!("{what}: labels"),
            format!("{} values, one per prediction", pv.len()),
            format!("shape {}", shape_text(l.shape())),
        ));
    }
    let mut top = 0i64;
    for &v in pv.iter().chain(&lv) {
        if v < 0 {
            return Err(Error::invalid(
                format!("{what}: classes"),
                "non-negative class indices",
                v.to_string(),
            ));
        }
        top = top.max(v);
    }
    cm.grow(top as usize + 1);
    let k = cm.k;
    for (&pi, &li) in pv.iter().zip(&lv) {
        cm.m[pi as usize * k + li as usize] += 1.0;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn a(shape: &[usize], v: &[f32]) -> NDArray {
        NDArray::from_f32(shape, v.to_vec()).unwrap()
    }

    #[test]
    pub(super) fn argmax_along_middle_axis() {
        let x: Vec<f64> = vec![0., 5., 2., 1., 3., 0., 9., 9., 1., 1., 0., 0.];
        // shape (2, 3, 2): argmax over axis 1
        assert_eq!(
            argmax_axis("t", &Vals::F64(Cow::Borrowed(&x)), &[2, 3, 2], 1).unwrap(),
            vec![2, 0, 0, 0]
        );
        assert_eq!(
            argmax_axis("t", &Vals::F64(Cow::Borrowed(&x)), &[3, 4], 1).unwrap(),
            vec![1, 2, 0]
        );
    }

    #[test]
    pub(super) fn broadcast_strides_repeat_unit_axes() {
        assert_eq!(broadcast_strides(&[5, 1], &[5, 3]), vec![1, 0]);
        assert_eq!(broadcast_strides(&[3], &[2, 3]), vec![0, 1]);
        assert_eq!(broadcast_strides(&[2, 3], &[2, 3]), vec![3, 1]);
    }

    #[test]
    pub(super) fn ordered_sum_is_chunk_stable() {
        let n = SERIAL_BELOW + 123;
        let s = ordered_sum(n, |i| i as f64 * 0.1);
        assert_eq!(s, ordered_sum(n, |i| i as f64 * 0.1));
        assert!((s - 0.1 * (n as f64 - 1.0) * n as f64 / 2.0).abs() < 1e-3);
    }

    #[test]
    pub(super) fn suggestions_name_close_metrics() {
        let e = canonical_name("acuracy").unwrap_err().to_string();
        assert!(e.contains("did you mean \"accuracy\""), "{e}");
        assert_eq!(canonical_name("CE").unwrap(), "cross_entropy");
    }

    #[test]
    pub(super) fn confusion_grows_and_keeps_counts() {
        let mut c = Confusion::default();
        c.m[1] = 3.0; // pred 0, label 1
        c.grow(3);
        assert_eq!(c.m[1], 3.0);
        assert_eq!(c.m.len(), 9);
    }

    #[test]
    pub(super) fn failed_update_leaves_metric_unchanged() {
        let mut m = EvalMetric::accuracy(1);
        m.update(&[a(&[2], &[0., 1.])], &[a(&[2, 2], &[1., 0., 0., 1.])])
            .unwrap();
        let before = m.get();
        assert!(m
            .update(
                &[a(&[2], &[0., 1.]), a(&[3], &[0., 1., 1.])],
                &[a(&[2, 2], &[1., 0., 0., 1.]), a(&[2, 2], &[1., 0., 0., 1.])]
            )
            .is_err());
        assert_eq!(m.get(), before);
    }
}
