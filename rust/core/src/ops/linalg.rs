//! Matrix products (MXNet `dot`, `batch_dot`): forward and backward through the GEMM kernel,
//! in the operands' own dtype (as `NDArray` products).

use super::{known, MaybeShape, OpCtx, OpDef, Operator, Params};
use crate::error::{tuple_text, Error, Result};
use crate::kernels::gemm::{batch_entry, per_batch, GemmScalar, Product};
use crate::tensor::linalg::{batch_dot, dot, with_gemm_dtype};
use crate::tensor::{DType, NDArray, Storable};
use std::sync::Arc;

/// The gradients of both operands of `batch` products `p` (one for `dot`), in the operands'
/// dtype (float16 through float32, as the forward pass).
fn gradients(
    p: &Product,
    batch: usize,
    g: &NDArray,
    a: &NDArray,
    b: &NDArray,
) -> Result<(NDArray, NDArray)> {
    fn typed<T: GemmScalar + Storable>(
        p: &Product,
        batch: usize,
        g: &NDArray,
        a: &NDArray,
        b: &NDArray,
    ) -> Result<(NDArray, NDArray)> {
        let g_s = g.values::<T>("dot: output gradient")?;
        let (x, y) = (a.values::<T>("dot: lhs")?, b.values::<T>("dot: rhs")?);
        let (sa, sb, sc) = (p.a.0 * p.a.1, p.b.0 * p.b.1, p.m() * p.n());
        let mut da = vec![T::ZERO; batch * sa];
        per_batch(&mut da, sa, |i, d| {
            p.grad_a(batch_entry(g_s, i, sc)?, batch_entry(y, i, sb)?, d)
        })?;
        let mut db = vec![T::ZERO; batch * sb];
        per_batch(&mut db, sb, |i, d| {
            p.grad_b(batch_entry(g_s, i, sc)?, batch_entry(x, i, sa)?, d)
        })?;
        Ok((
            NDArray::from_vec(a.shape(), da)?,
            NDArray::from_vec(b.shape(), db)?,
        ))
    }
    let g32;
    let g = if a.dtype() == DType::Float16 {
        g32 = g.astype(DType::Float32);
        &g32
    } else {
        g
    };
    with_gemm_dtype!(a, b, T => typed::<T>(p, batch, g, a, b))
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
        let q = DotParams::from_params(p)?;
        Ok(Arc::new(Dot {
            ta: q.transpose_a,
            tb: q.transpose_b,
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
    fn dtype_generic(&self) -> bool {
        true
    }

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
        let (da, db) = gradients(&p, 1, &out_grads[0], a, b)?;
        Ok(vec![Some(da), Some(db)])
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
        let q = DotParams::from_params(p)?;
        Ok(Arc::new(BatchDot {
            ta: q.transpose_a,
            tb: q.transpose_b,
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
    fn dtype_generic(&self) -> bool {
        true
    }

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
        self.plan(ctx.node, a.shape(), b.shape())?;
        Ok(vec![batch_dot(a, b, self.ta, self.tb)?])
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
        let (batch, p, _) = self.plan(ctx.node, a.shape(), b.shape())?;
        let (da, db) = gradients(&p, batch, &out_grads[0], a, b)?;
        Ok(vec![Some(da), Some(db)])
    }
}

crate::op_params! {
    struct DotParams {
        transpose_a: Bool = "False", "Whether to transpose the left operand.";
        transpose_b: Bool = "False", "Whether to transpose the right operand.";
        forward_stype: Enum(&["None", "default", "row_sparse", "csr"]) = "None",
            "Storage type of the output; accepted for MXNet JSON, mxfn computes dense results.";
    }
}

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
        params: DotParams::DEFS,
        create: Dot::create,
        variadic: None,
    },
    OpDef {
        name: "batch_dot",
        aliases: &[],
        py_name: None,
        doc: "Batched matrix product of 3-D arrays: (B, m, k) × (B, k, n) → (B, m, n), with \
              optional transposes of the last two axes of either operand.",
        params: DotParams::DEFS,
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
