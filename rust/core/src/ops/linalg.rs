//! Matrix products (MXNet `dot`, `batch_dot`): forward and backward through the GEMM kernel.

use super::params::{param, ParamDef, ParamKind::*};
use super::{known, MaybeShape, OpCtx, OpDef, Operator, Params};
use crate::error::{tuple_text, Error, Result};
use crate::kernels::gemm::{gemm, MatRef};
use crate::kernels::par;
use crate::tensor::linalg::dot;
use crate::tensor::NDArray;
use std::sync::{Arc, Mutex};

/// One product `op(A) · op(B)` as stored matrices: A is `a.0 × a.1`, B is `b.0 × b.1`
/// (row-major), `op` transposes when `ta` / `tb`; the result is `m × n` with inner size `k`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Product {
    /// Rows and columns of A as stored.
    pub a: (usize, usize),
    /// Rows and columns of B as stored.
    pub b: (usize, usize),
    /// Whether A is transposed.
    pub ta: bool,
    /// Whether B is transposed.
    pub tb: bool,
}

impl Product {
    /// Rows of the result.
    pub fn m(&self) -> usize {
        if self.ta {
            self.a.1
        } else {
            self.a.0
        }
    }
    /// Columns of the result.
    pub fn n(&self) -> usize {
        if self.tb {
            self.b.0
        } else {
            self.b.1
        }
    }
    /// Inner size as seen from A.
    pub fn k(&self) -> usize {
        if self.ta {
            self.a.0
        } else {
            self.a.1
        }
    }
    /// Inner size as seen from B.
    pub fn k_b(&self) -> usize {
        if self.tb {
            self.b.1
        } else {
            self.b.0
        }
    }

    fn op_a<'a>(&self, a: &'a [f32]) -> MatRef<'a, f32> {
        let m = MatRef::row_major(a, self.a.0, self.a.1);
        if self.ta {
            m.t()
        } else {
            m
        }
    }

    fn op_b<'a>(&self, b: &'a [f32]) -> MatRef<'a, f32> {
        let m = MatRef::row_major(b, self.b.0, self.b.1);
        if self.tb {
            m.t()
        } else {
            m
        }
    }

    /// `c = op(A) · op(B)`.
    pub fn forward(&self, a: &[f32], b: &[f32], c: &mut [f32]) -> Result<()> {
        gemm(self.op_a(a), self.op_b(b), c, false)
    }

    /// The gradient of A given the output gradient `g` (m × n): G·op(B)ᵀ, transposed back
    /// to A's storage when `ta` (op(B)·Gᵀ).
    pub fn grad_a(&self, g: &[f32], b: &[f32], da: &mut [f32]) -> Result<()> {
        let gm = MatRef::row_major(g, self.m(), self.n());
        if self.ta {
            gemm(self.op_b(b), gm.t(), da, false)
        } else {
            gemm(gm, self.op_b(b).t(), da, false)
        }
    }

    /// The gradient of B: op(A)ᵀ·G, or Gᵀ·op(A) in B's storage when `tb`.
    pub fn grad_b(&self, g: &[f32], a: &[f32], db: &mut [f32]) -> Result<()> {
        let gm = MatRef::row_major(g, self.m(), self.n());
        if self.tb {
            gemm(gm.t(), self.op_a(a), db, false)
        } else {
            gemm(self.op_a(a).t(), gm, db, false)
        }
    }
}

/// Runs `f(i, out_i)` for each of the `out.len() / size` batch entries in parallel; the first
/// error (if any) is returned.
fn per_batch(
    out: &mut [f32],
    size: usize,
    f: impl Fn(usize, &mut [f32]) -> Result<()> + Sync + Send,
) -> Result<()> {
    if size == 0 {
        return Ok(());
    }
    let failed: Mutex<Option<Error>> = Mutex::new(None);
    par::for_each_row_mut(out, size, |i, chunk| {
        if let Err(e) = f(i, chunk) {
            if let Ok(mut slot) = failed.lock() {
                slot.get_or_insert(e);
            }
        }
    });
    match failed.into_inner() {
        Ok(Some(e)) => Err(e),
        Ok(None) => Ok(()),
        Err(_) => Err(Error::Msg("internal: a batched product panicked".into())),
    }
}

fn slice(x: &[f32], i: usize, size: usize) -> Result<&[f32]> {
    x.get(i * size..(i + 1) * size)
        .ok_or_else(|| Error::Msg("internal: batch slice out of range".into()))
}

fn shape_text(s: &[usize]) -> String {
    tuple_text(&format!("{s:?}"))
}

// ---------------------------------------------------------------------------------------------
// dot

#[derive(Debug)]
struct Dot {
    ta: bool,
    tb: bool,
}

impl Dot {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(Dot {
            ta: p.bool("transpose_a")?,
            tb: p.bool("transpose_b")?,
        }))
    }

    /// MXNet's DotShape: A is (all leading axes × last axis), or (first axis × the rest) when
    /// transposed; B is (first axis × the rest), or (leading axes × last axis) when
    /// transposed. Output: A's outer axes then B's; two vectors give shape (1,).
    fn plan(&self, node: &str, sa: &[usize], sb: &[usize]) -> Result<(Product, Vec<usize>)> {
        let bad = |expected: String| {
            Error::shape(
                "dot",
                format!("node \"{node}\": input \"rhs\""),
                format_args!("{expected}"),
                sb,
            )
        };
        let (Some(&a_first), Some(&a_last), Some(&b_first), Some(&b_last)) =
            (sa.first(), sa.last(), sb.first(), sb.last())
        else {
            return Err(Error::invalid(
                format!("dot node \"{node}\": inputs"),
                "arrays with at least one axis",
                format!("shapes {} and {}", shape_text(sa), shape_text(sb)),
            ));
        };
        if sa.len() == 1 && sb.len() == 1 && (self.ta || self.tb) {
            return Err(Error::invalid(
                format!("dot node \"{node}\": parameters \"transpose_a\" / \"transpose_b\""),
                "False for two vectors (vectors cannot be transposed)",
                "True",
            ));
        }
        let a = if self.ta {
            (a_first, sa[1..].iter().product())
        } else {
            (sa[..sa.len() - 1].iter().product(), a_last)
        };
        let b = if self.tb {
            (sb[..sb.len() - 1].iter().product(), b_last)
        } else {
            (b_first, sb[1..].iter().product())
        };
        let p = Product {
            a,
            b,
            ta: self.ta,
            tb: self.tb,
        };
        if p.k() != p.k_b() {
            return Err(bad(format!(
                "a shape whose {} is {} (lhs {}{})",
                if self.tb { "last axis" } else { "first axis" },
                p.k(),
                shape_text(sa),
                if self.ta { ", transposed" } else { "" }
            )));
        }
        let mut out: Vec<usize> = Vec::new();
        if sa.len() > 1 {
            out.extend(if self.ta {
                &sa[1..]
            } else {
                &sa[..sa.len() - 1]
            });
        }
        if sb.len() > 1 {
            out.extend(if self.tb {
                &sb[..sb.len() - 1]
            } else {
                &sb[1..]
            });
        }
        if out.is_empty() {
            out.push(1);
        }
        Ok((p, out))
    }
}

impl Operator for Dot {
    fn arguments(&self) -> Vec<String> {
        vec!["lhs".into(), "rhs".into()]
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let names = ["lhs", "rhs"];
        let sa = known("dot", node, &names, inputs, 0)?;
        let sb = known("dot", node, &names, inputs, 1)?;
        Ok(vec![self.plan(node, sa, sb)?.1])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let (a, b) = (&inputs[0], &inputs[1]);
        let (_, out) = self.plan(ctx.node, a.shape(), b.shape())?;
        let c = dot(a, b, self.ta, self.tb)?;
        let dims: Vec<isize> = out.iter().map(|&d| d as isize).collect();
        Ok(vec![c.reshape(&dims)?])
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let (a, b) = (&inputs[0], &inputs[1]);
        let (p, _) = self.plan(ctx.node, a.shape(), b.shape())?;
        let g = out_grads[0].f32s("dot: output gradient")?;
        let (x, y) = (a.f32s("dot: lhs")?, b.f32s("dot: rhs")?);
        let mut da = vec![0.0f32; a.size()];
        p.grad_a(g, y, &mut da)?;
        let mut db = vec![0.0f32; b.size()];
        p.grad_b(g, x, &mut db)?;
        Ok(vec![
            Some(NDArray::from_f32(a.shape(), da)?),
            Some(NDArray::from_f32(b.shape(), db)?),
        ])
    }
}

// ---------------------------------------------------------------------------------------------
// batch_dot

#[derive(Debug)]
struct BatchDot {
    ta: bool,
    tb: bool,
}

impl BatchDot {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(BatchDot {
            ta: p.bool("transpose_a")?,
            tb: p.bool("transpose_b")?,
        }))
    }

    /// (batch, product of one entry, output shape); MXNet 1.9 takes 3-D inputs only.
    fn plan(&self, node: &str, sa: &[usize], sb: &[usize]) -> Result<(usize, Product, Vec<usize>)> {
        let ([ba, a0, a1], [bb, b0, b1]) = (sa, sb) else {
            let (arg, s) = if sa.len() != 3 {
                ("lhs", sa)
            } else {
                ("rhs", sb)
            };
            return Err(Error::shape(
                "batch_dot",
                format!("node \"{node}\": input \"{arg}\""),
                format_args!("a 3-D shape (batch, rows, cols)"),
                s,
            ));
        };
        let p = Product {
            a: (*a0, *a1),
            b: (*b0, *b1),
            ta: self.ta,
            tb: self.tb,
        };
        if ba != bb || p.k() != p.k_b() {
            return Err(Error::shape(
                "batch_dot",
                format!("node \"{node}\": input \"rhs\""),
                format_args!(
                    "batch size {ba} and inner size {} (lhs {}{}){}",
                    p.k(),
                    shape_text(sa),
                    if self.ta { ", transposed" } else { "" },
                    if self.tb { ", rhs transposed" } else { "" }
                ),
                sb,
            ));
        }
        Ok((*ba, p, vec![*ba, p.m(), p.n()]))
    }
}

impl Operator for BatchDot {
    fn arguments(&self) -> Vec<String> {
        vec!["lhs".into(), "rhs".into()]
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let names = ["lhs", "rhs"];
        let sa = known("batch_dot", node, &names, inputs, 0)?;
        let sb = known("batch_dot", node, &names, inputs, 1)?;
        Ok(vec![self.plan(node, sa, sb)?.2])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let (a, b) = (&inputs[0], &inputs[1]);
        let (batch, p, out_shape) = self.plan(ctx.node, a.shape(), b.shape())?;
        let (x, y) = (a.f32s("batch_dot: lhs")?, b.f32s("batch_dot: rhs")?);
        let (sa, sb, sc) = (p.a.0 * p.a.1, p.b.0 * p.b.1, p.m() * p.n());
        let mut out = vec![0.0f32; batch * sc];
        // One GEMM per batch entry, the entries in parallel (each GEMM is small).
        per_batch(&mut out, sc, |i, c| {
            p.forward(slice(x, i, sa)?, slice(y, i, sb)?, c)
        })?;
        Ok(vec![NDArray::from_f32(&out_shape, out)?])
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let (a, b) = (&inputs[0], &inputs[1]);
        let (_, p, _) = self.plan(ctx.node, a.shape(), b.shape())?;
        let g = out_grads[0].f32s("batch_dot: output gradient")?;
        let (x, y) = (a.f32s("batch_dot: lhs")?, b.f32s("batch_dot: rhs")?);
        let (sa, sb, sc) = (p.a.0 * p.a.1, p.b.0 * p.b.1, p.m() * p.n());
        let mut da = vec![0.0f32; a.size()];
        per_batch(&mut da, sa, |i, d| {
            p.grad_a(slice(g, i, sc)?, slice(y, i, sb)?, d)
        })?;
        let mut db = vec![0.0f32; b.size()];
        per_batch(&mut db, sb, |i, d| {
            p.grad_b(slice(g, i, sc)?, slice(x, i, sa)?, d)
        })?;
        Ok(vec![
            Some(NDArray::from_f32(a.shape(), da)?),
            Some(NDArray::from_f32(b.shape(), db)?),
        ])
    }
}

const DOT_PARAMS: &[ParamDef] = &[
    param(
        "transpose_a",
        Bool,
        Some("False"),
        "Whether to transpose the left operand.",
    ),
    param(
        "transpose_b",
        Bool,
        Some("False"),
        "Whether to transpose the right operand.",
    ),
    param(
        "forward_stype",
        Enum(&["None", "default", "row_sparse", "csr"]),
        Some("None"),
        "Storage type of the output; accepted for MXNet JSON, mxfn computes dense results.",
    ),
];

/// The entries of this family.
pub static OPS: &[OpDef] = &[
    OpDef {
        name: "dot",
        aliases: &[],
        py_name: None,
        doc: "Matrix product. lhs is viewed as a matrix of (all leading axes × last axis) and \
              rhs as (first axis × the remaining axes), each transposed on request; the result \
              has lhs's outer axes followed by rhs's. Two vectors give their inner product with \
              shape (1,).",
        params: DOT_PARAMS,
        create: Dot::create,
        variadic: None,
    },
    OpDef {
        name: "batch_dot",
        aliases: &[],
        py_name: None,
        doc: "Batched matrix product of 3-D arrays: (B, m, k) × (B, k, n) → (B, m, n), with \
              optional transposes of the last two axes of either operand.",
        params: DOT_PARAMS,
        create: BatchDot::create,
        variadic: None,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        c
    }

    fn transpose(x: &[f32], r: usize, c: usize) -> Vec<f32> {
        (0..r * c).map(|i| x[(i % r) * c + i / r]).collect()
    }

    #[test]
    fn product_gradients_match_explicit_formulas() {
        let (m, k, n) = (3, 4, 2);
        let a: Vec<f32> = (0..m * k).map(|v| (v % 5) as f32 - 2.0).collect();
        let b: Vec<f32> = (0..k * n).map(|v| (v % 3) as f32 - 1.0).collect();
        let g: Vec<f32> = (0..m * n).map(|v| v as f32 * 0.5).collect();
        // dA = G·Bᵀ, dB = Aᵀ·G, whatever way A and B are stored.
        let da_want = naive(&g, &transpose(&b, k, n), m, n, k);
        let db_want = naive(&transpose(&a, m, k), &g, k, m, n);
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let sa = if ta { transpose(&a, m, k) } else { a.clone() };
            let sb = if tb { transpose(&b, k, n) } else { b.clone() };
            let p = Product {
                a: if ta { (k, m) } else { (m, k) },
                b: if tb { (n, k) } else { (k, n) },
                ta,
                tb,
            };
            let mut c = vec![0.0; m * n];
            p.forward(&sa, &sb, &mut c).unwrap();
            assert_eq!(c, naive(&a, &b, m, k, n));
            let mut da = vec![0.0; m * k];
            p.grad_a(&g, &sb, &mut da).unwrap();
            let want = if ta {
                transpose(&da_want, m, k)
            } else {
                da_want.clone()
            };
            assert_eq!(da, want, "ta={ta} tb={tb}");
            let mut db = vec![0.0; k * n];
            p.grad_b(&g, &sa, &mut db).unwrap();
            let want = if tb {
                transpose(&db_want, k, n)
            } else {
                db_want.clone()
            };
            assert_eq!(db, want, "ta={ta} tb={tb}");
        }
    }

    #[test]
    fn per_batch_reports_errors() {
        let mut out = vec![0.0f32; 6];
        let r = per_batch(&mut out, 2, |i, c| {
            if i == 1 {
                return Err(Error::Msg("boom".into()));
            }
            c.fill(i as f32);
            Ok(())
        });
        assert!(r.is_err());
    }
}
