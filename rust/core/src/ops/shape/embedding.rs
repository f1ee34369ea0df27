//! `Embedding`: rows of a weight table picked by index.

use crate::error::{Error, Result};
use crate::kernels::copy::{gather_rows, scatter_add_rows};
use crate::ops::params::Params;
use crate::ops::{check_or_fill, known, MaybeShape, OpCtx, Operator};
use crate::tensor::{DType, NDArray};
use std::sync::Arc;

// ---------------------------------------------------------------------------------------------
// Embedding
// ---------------------------------------------------------------------------------------------

crate::op_params! {
    pub(crate) struct EmbeddingParams {
        input_dim: Positive, "Vocabulary size: indices lie in [0, input_dim).";
        output_dim: Positive, "Size of each embedding vector.";
        dtype: Enum(&[
                    "float32", "float64", "float16", "uint8", "int8", "int32", "int64",
                ]) = "float32",
            "Data type of the weight and the output.";
        sparse_grad: Bool = "False",
            "Accepted for compatibility; the weight gradient is always dense here.";
    }
}

#[derive(Debug)]
pub(crate) struct Embedding {
    input_dim: usize,
    output_dim: usize,
    dtype: DType,
}

impl Embedding {
    pub(crate) fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        let q = EmbeddingParams::from_params(p)?;
        Ok(Arc::new(Embedding {
            input_dim: q.input_dim,
            output_dim: q.output_dim,
            dtype: DType::parse(&q.dtype)?,
        }))
    }

    /// The weight row of every index. MXNet truncates the float index and clips it into
    /// [0, input_dim) silently; an index outside that range is an error here (SPEC §8).
    fn rows(&self, node: &str, idx: &[f32]) -> Result<Vec<usize>> {
        idx.iter()
            .enumerate()
            .map(|(pos, &v)| {
                // `v >= 0.0` also rejects NaN.
                let j = if v >= 0.0 { v as usize } else { usize::MAX };
                if j < self.input_dim {
                    Ok(j)
                } else {
                    Err(Error::invalid(
                        format!("Embedding node \"{node}\": input \"data\""),
                        format!("indices in [0, input_dim={})", self.input_dim),
                        format!("index {v} at position {pos}"),
                    ))
                }
            })
            .collect()
    }

    fn check_weight(&self, node: &str, w: &NDArray) -> Result<()> {
        let want = [self.input_dim, self.output_dim];
        if w.shape() != want {
            return Err(Error::shape(
                "Embedding",
                format!("node \"{node}\": input \"weight\""),
                want,
                w.shape(),
            ));
        }
        Ok(())
    }
}

impl Operator for Embedding {
    fn arguments(&self) -> Vec<String> {
        vec!["data".into(), "weight".into()]
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let want = [self.input_dim, self.output_dim];
        check_or_fill("Embedding", node, "weight", &mut inputs[1], &want)?;
        let mut s = known("Embedding", node, &["data", "weight"], inputs, 0)?.to_vec();
        s.push(self.output_dim);
        Ok(vec![s])
    }

    fn infer_type(
        &self,
        inputs: &mut [Option<DType>],
        _aux: &mut [Option<DType>],
    ) -> Result<Vec<DType>> {
        if let Some(d) = inputs.get_mut(0) {
            d.get_or_insert(DType::Float32);
        }
        if let Some(w) = inputs.get_mut(1) {
            match w {
                Some(t) if *t != self.dtype => {
                    return Err(Error::invalid(
                        "Embedding: input \"weight\" dtype",
                        self.dtype.name(),
                        t.name(),
                    ))
                }
                _ => *w = Some(self.dtype),
            }
        }
        Ok(vec![self.dtype])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let (x, w) = (&inputs[0], &inputs[1]);
        self.check_weight(ctx.node, w)?;
        let rows = self.rows(ctx.node, x.f32s("Embedding: data")?)?;
        let ws = w.f32s("Embedding: weight")?;
        let d = self.output_dim;
        let out = gather_rows(ws, d, &rows);
        let mut s = x.shape().to_vec();
        s.push(d);
        Ok(vec![NDArray::from_f32(&s, out)?])
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let rows = self.rows(ctx.node, inputs[0].f32s("Embedding: data")?)?;
        let g = out_grads[0].f32s("Embedding: output gradient")?;
        let (k, d) = (self.input_dim, self.output_dim);
        let dw = scatter_add_rows(g, d, &rows, k);
        Ok(vec![None, Some(NDArray::from_f32(&[k, d], dw)?)])
    }
}
