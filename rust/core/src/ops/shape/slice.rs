//! `slice_axis`, `slice` and `reverse`: strided regions of the input.

use super::{bad_param, norm_axis};
use crate::error::Result;
use crate::kernels::copy::*;
use crate::kernels::map::axis_dims;
use crate::ops::params::Params;
use crate::ops::{known, MaybeShape, OpCtx, Operator};
use crate::tensor::NDArray;
use crate::with_dtype;
use std::sync::Arc;

// ---------------------------------------------------------------------------------------------
// slice_axis and slice
// ---------------------------------------------------------------------------------------------

crate::op_params! {
    pub(crate) struct SliceAxis {
        axis: Int, "The axis to slice (negative counts from the end).";
        begin: Int, "First index taken (negative counts from the end).";
        end: OptInt, "One past the last index taken (negative counts from the end; None: the end).";
    }
}

impl SliceAxis {
    pub(crate) fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(Self::from_params(p)?))
    }

    /// MXNet's `GetSliceAxisParams`: the axis and the (non-empty) range [begin, end).
    fn plan(&self, node: &str, d: &[usize]) -> Result<(usize, usize, usize)> {
        let op = "slice_axis";
        let ax = norm_axis(op, node, "axis", self.axis, d.len())?;
        let n = d[ax] as i64;
        if n == 0 {
            return Ok((ax, 0, 0));
        }
        let b = if self.begin < 0 {
            self.begin + n
        } else {
            self.begin
        };
        let e = match self.end {
            None => n,
            Some(e) if e < 0 => e + n,
            Some(e) => e,
        };
        if !(0 <= b && b < e && e <= n) {
            let end = self.end.map_or("None".to_string(), |e| e.to_string());
            return Err(bad_param(
                op,
                node,
                "begin",
                format!("0 <= begin < end <= {n} (after counting negatives from the end of axis {ax} of input \"data\")"),
                format!("begin={}, end={end}", self.begin),
            ));
        }
        Ok((ax, b as usize, e as usize))
    }
}

impl Operator for SliceAxis {
    fn dtype_generic(&self) -> bool {
        true
    }
    fn arguments(&self) -> Vec<String> {
        vec!["data".into()]
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let d = known("slice_axis", node, &["data"], inputs, 0)?;
        let (ax, b, e) = self.plan(node, d)?;
        let mut s = d.to_vec();
        s[ax] = e - b;
        Ok(vec![s])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let x = &inputs[0];
        let (ax, b, e) = self.plan(ctx.node, x.shape())?;
        let (outer, n, inner) = axis_dims(x.shape(), ax);
        let mut s = x.shape().to_vec();
        s[ax] = e - b;
        let out = with_dtype!(x.dtype(), T => {
            let xs = x.values::<T>("slice_axis: data")?;
            NDArray::from_vec::<T>(&s, take_range(xs, outer, n, inner, b, e - b))?
        });
        Ok(vec![out])
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let x = &inputs[0];
        let (ax, b, e) = self.plan(ctx.node, x.shape())?;
        let (outer, n, inner) = axis_dims(x.shape(), ax);
        let g = &out_grads[0];
        let dx = with_dtype!(g.dtype(), T => {
            let gs = g.values::<T>("slice_axis: output gradient")?;
            NDArray::from_vec::<T>(x.shape(), place_range(gs, outer, n, inner, b, e - b))?
        });
        Ok(vec![Some(dx)])
    }
}

/// Parses MXNet's tuple text whose entries may be None: `"(None, 1)"`, `"[0, -2]"`, `"(3,)"`,
/// `"()"`, or a bare `"2"` / `"None"`.
pub fn parse_opt_tuple(s: &str) -> Option<Vec<Option<i64>>> {
    let t = s.trim();
    let inner =
        if (t.starts_with('(') && t.ends_with(')')) || (t.starts_with('[') && t.ends_with(']')) {
            &t[1..t.len() - 1]
        } else {
            t
        };
    inner
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| match p {
            "None" => Some(None),
            p => p.trim_end_matches('L').parse::<i64>().ok().map(Some),
        })
        .collect()
}

crate::op_params! {
    pub(crate) struct SliceParams {
        begin: Str, "Tuple of start indices, entries int or None, e.g. \"(None, 1)\".";
        end: Str, "Tuple of stop indices (exclusive), entries int or None; as long as begin.";
        step: Str = "()", "Tuple of steps, entries int or None (= 1); empty, or as long as begin.";
    }
}

#[derive(Debug)]
pub(crate) struct Slice {
    begin: Vec<Option<i64>>,
    end: Vec<Option<i64>>,
    step: Vec<Option<i64>>,
}

impl Slice {
    pub(crate) fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        let q = SliceParams::from_params(p)?;
        let get = |name: &str, text: &str| -> Result<Vec<Option<i64>>> {
            parse_opt_tuple(text).ok_or_else(|| {
                p.error(
                    name,
                    "a tuple of ints or None, e.g. (None, 1)",
                    format!("\"{text}\""),
                )
            })
        };
        let (begin, end, step) = (
            get("begin", &q.begin)?,
            get("end", &q.end)?,
            get("step", &q.step)?,
        );
        if end.len() != begin.len() {
            return Err(p.error(
                "end",
                &format!("{} entries, like begin", begin.len()),
                end.len(),
            ));
        }
        if !step.is_empty() && step.len() != begin.len() {
            return Err(p.error(
                "step",
                &format!("no entries or {}, like begin", begin.len()),
                step.len(),
            ));
        }
        if step.contains(&Some(0)) {
            return Err(p.error("step", "non-zero steps", "a step of 0"));
        }
        Ok(Arc::new(Strided(Slice { begin, end, step })))
    }
}

impl Region for Slice {
    const OP: &'static str = "slice";

    /// MXNet's `GetIndexRange` + `SetSliceOpOutputDimSize`: the region on every axis.
    fn plan(&self, node: &str, d: &[usize]) -> Result<Vec<AxisRange>> {
        if self.begin.len() > d.len() {
            return Err(bad_param(
                "slice",
                node,
                "begin",
                format!("at most {} entries (the axes of input \"data\")", d.len()),
                self.begin.len().to_string(),
            ));
        }
        let mut out = Vec::with_capacity(d.len());
        for (i, &len) in d.iter().enumerate() {
            if i >= self.begin.len() {
                out.push(AxisRange {
                    start: 0,
                    count: len,
                    step: 1,
                });
                continue;
            }
            let s = self.step.get(i).copied().flatten().unwrap_or(1);
            let len = len as i64;
            let (mut b, mut e) = (0i64, 0i64);
            if len > 0 {
                let end_given = self.end[i];
                b = self.begin[i].unwrap_or(if s < 0 { len - 1 } else { 0 });
                e = end_given.unwrap_or(if s < 0 { -1 } else { len });
                if b < 0 {
                    b += len;
                }
                if e < 0 && end_given.is_some() {
                    e += len;
                }
                if b < 0 && s > 0 {
                    b = 0;
                }
                if b > len - 1 && s < 0 {
                    b = len - 1;
                }
                if b < 0 || b > len - 1 {
                    b = -1;
                }
                e = e.clamp(-1, len);
            }
            let count = if e != b && b >= 0 {
                if s > 0 && e > b {
                    (e - b - 1) / s + 1
                } else if s < 0 && e < b {
                    (b - e - 1) / (-s) + 1
                } else {
                    0
                }
            } else {
                0
            };
            out.push(AxisRange {
                start: if count > 0 { b as usize } else { 0 },
                count: count as usize,
                step: s as isize,
            });
        }
        Ok(out)
    }
}

/// How an operator whose output is a strided region of its input (`slice`, `reverse`) picks
/// the region, for an input of shape `d`.
pub(crate) trait Region: std::fmt::Debug + Send + Sync + 'static {
    /// The operator's MXNet name, for errors.
    const OP: &'static str;
    /// The range taken along every axis.
    fn plan(&self, node: &str, d: &[usize]) -> Result<Vec<AxisRange>>;
}

/// An operator whose output is a strided region of its input: forward gathers it, backward
/// scatters the gradient back into a zero input-shaped gradient.
#[derive(Debug)]
pub(crate) struct Strided<R>(pub(crate) R);

impl<R: Region> Operator for Strided<R> {
    fn dtype_generic(&self) -> bool {
        true
    }
    fn arguments(&self) -> Vec<String> {
        vec!["data".into()]
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let d = known(R::OP, node, &["data"], inputs, 0)?;
        Ok(vec![self
            .0
            .plan(node, d)?
            .iter()
            .map(|r| r.count)
            .collect()])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let x = &inputs[0];
        let r = self.0.plan(ctx.node, x.shape())?;
        let s: Vec<usize> = r.iter().map(|a| a.count).collect();
        let out = with_dtype!(x.dtype(), T => {
            let xs = x.values::<T>(&format!("{}: data", R::OP))?;
            NDArray::from_vec::<T>(&s, strided_gather(xs, x.shape(), &r))?
        });
        Ok(vec![out])
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let x = &inputs[0];
        let r = self.0.plan(ctx.node, x.shape())?;
        let g = &out_grads[0];
        let dx = with_dtype!(g.dtype(), T => {
            let gs = g.values::<T>(&format!("{}: output gradient", R::OP))?;
            NDArray::from_vec::<T>(x.shape(), strided_scatter(gs, x.shape(), &r))?
        });
        Ok(vec![Some(dx)])
    }
}

// ---------------------------------------------------------------------------------------------
// reverse
// ---------------------------------------------------------------------------------------------

crate::op_params! {
    pub(crate) struct Reverse {
        axis: Shape, "The axes to reverse (negative values count from the end; MXNet 1.9.1 refuses them).";
    }
}

impl Reverse {
    pub(crate) fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(Strided(Self::from_params(p)?)))
    }
}

impl Region for Reverse {
    const OP: &'static str = "reverse";

    /// Every axis whole, walked backwards on the reversed ones.
    fn plan(&self, node: &str, d: &[usize]) -> Result<Vec<AxisRange>> {
        let mut reversed = vec![false; d.len()];
        for &a in &self.axis {
            reversed[norm_axis("reverse", node, "axis", a, d.len())?] = true;
        }
        Ok(d.iter()
            .zip(reversed)
            .map(|(&n, rev)| match rev {
                true if n > 0 => AxisRange {
                    start: n - 1,
                    count: n,
                    step: -1,
                },
                _ => AxisRange {
                    start: 0,
                    count: n,
                    step: 1,
                },
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_plan_follows_mxnet_index_range() {
        let s = |b: &str, e: &str, st: &str, d: &[usize]| {
            let sl = Slice {
                begin: parse_opt_tuple(b).unwrap(),
                end: parse_opt_tuple(e).unwrap(),
                step: parse_opt_tuple(st).unwrap(),
            };
            sl.plan("s", d)
                .unwrap()
                .iter()
                .map(|r| (r.start, r.count))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            s("(None, 1)", "(None, 3)", "()", &[2, 4]),
            vec![(0, 2), (1, 2)]
        );
        assert_eq!(s("(-1,)", "(None,)", "(-1,)", &[5]), vec![(4, 5)]);
        assert_eq!(s("(None,)", "(None,)", "(-2,)", &[5]), vec![(4, 3)]);
        assert_eq!(s("(7,)", "(9,)", "()", &[5]), vec![(0, 0)]);
        assert_eq!(s("(-9,)", "(2,)", "()", &[5]), vec![(0, 2)]);
        assert_eq!(s("(1,)", "(-1,)", "(None,)", &[5, 2]), vec![(1, 3), (0, 2)]);
        assert_eq!(s("(3,)", "(1,)", "()", &[5]), vec![(0, 0)]);
    }

    #[test]
    fn opt_tuples_parse() {
        assert_eq!(parse_opt_tuple("(None, 1)"), Some(vec![None, Some(1)]));
        assert_eq!(parse_opt_tuple("[0, -2]"), Some(vec![Some(0), Some(-2)]));
        assert_eq!(parse_opt_tuple("(3,)"), Some(vec![Some(3)]));
        assert_eq!(parse_opt_tuple("()"), Some(vec![]));
        assert_eq!(parse_opt_tuple("2"), Some(vec![Some(2)]));
        assert_eq!(parse_opt_tuple("(a, 1)"), None);
    }
}
