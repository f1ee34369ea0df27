//! Pooling (max, avg, sum, lp; global; valid, full and same conventions) over 1, 2 or 3
//! spatial axes, over the kernels of `kernels::pool`.

use super::{known, MaybeShape, OpCtx, OpDef, Operator, Params};
use crate::error::{Error, Result};
use crate::kernels::par;
use crate::kernels::pool::{
    pool_backward, pool_forward, pool_out_size, PoolConvention, PoolGeom, PoolKind,
};
use crate::tensor::NDArray;
use std::sync::Arc;

/// The entries of this family.
pub static OPS: &[OpDef] = &[OpDef {
    name: "Pooling",
    aliases: &[],
    py_name: None,
    doc: "Pools windows of the input over 1, 2 or 3 spatial axes (data (batch, channel, \
          *spatial)): max, avg (mean), sum, or lp ((Σ x^p)^(1/p), p_value 1–3). Along each axis \
          the output size is 1 + floor((x + 2·pad − kernel) / stride) with \
          pooling_convention=\"valid\", 1 + ceil(...) with \"full\", ceil((x + 2·pad) / stride) \
          with \"same\" (1-D only). Max pooling ignores padding; avg divides by the window \
          clipped to the padded input, or to the real input when count_include_pad=False. \
          global_pool pools each whole channel, ignoring kernel, stride and pad.",
    params: PoolingParams::DEFS,
    create: Pooling::create,
    variadic: None,
}];

crate::op_params! {
    struct PoolingParams {
        kernel: Shape = "()", "Pooling window size: (w,), (h, w) or (d, h, w).";
        pool_type: Enum(&["max", "avg", "sum", "lp"]) = "max", "Pooling function.";
        global_pool: Bool = "False", "Pool over whole channels, ignoring kernel, stride and pad.";
        cudnn_off: Bool = "False", "Turn off cuDNN (accepted, unused).";
        pooling_convention: Enum(&["valid", "full", "same"]) = "valid",
            "How the number of windows is rounded: valid (floor), full (ceil), same.";
        stride: Shape = "()", "Window stride per axis; default 1.";
        pad: Shape = "()", "Padding on both sides per axis; default 0.";
        p_value: OptInt = "None", "The p of lp pooling: 1, 2 or 3.";
        count_include_pad: Enum(&["None", "True", "False", "true", "false", "1", "0"]) = "None",
            "Whether avg pooling counts padding in the divisor; None means True.";
        layout: Enum(&["None", "NCW", "NCHW", "NCDHW", "NWC", "NHWC", "NDHWC"]) = "None",
            "Data layout; only NCW, NCHW and NCDHW are supported.";
    }
}

#[derive(Debug)]
struct Pooling {
    kind: PoolKind,
    global: bool,
    convention: PoolConvention,
    kernel: Vec<usize>,
    /// Empty: one per kernel axis (1s for stride, 0s for pad).
    stride: Vec<usize>,
    pad: Vec<usize>,
    layout: Option<String>,
}

const OP: &str = "Pooling";

fn usizes(p: &Params, name: &str, v: Vec<i64>, min: i64) -> Result<Vec<usize>> {
    if v.len() > 3 || v.iter().any(|&x| x < min) {
        return Err(p.error(name, &format!("up to 3 values >= {min}"), format!("{v:?}")));
    }
    Ok(v.into_iter().map(|x| x as usize).collect())
}

fn to3(v: &[usize], fill: usize) -> [usize; 3] {
    let mut out = [fill; 3];
    let start = 3 - v.len().min(3);
    out[start..].copy_from_slice(&v[v.len().saturating_sub(3)..]);
    out
}

impl Pooling {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        let q = PoolingParams::from_params(p)?;
        let count_include_pad = !matches!(q.count_include_pad.as_str(), "False" | "false" | "0");
        let kind = match q.pool_type.as_str() {
            "max" => PoolKind::Max,
            "avg" => PoolKind::Avg { count_include_pad },
            "sum" => PoolKind::Sum,
            _ => match q.p_value {
                Some(v @ 1..=3) => PoolKind::Lp(v as u32),
                other => {
                    return Err(p.error(
                        "p_value",
                        "1, 2 or 3 with pool_type=\"lp\"",
                        format!("{other:?}"),
                    ))
                }
            },
        };
        let global = q.global_pool;
        let convention = match q.pooling_convention.as_str() {
            "full" => PoolConvention::Full,
            "same" => PoolConvention::Same,
            _ => PoolConvention::Valid,
        };
        let kernel = usizes(p, "kernel", q.kernel, 1)?;
        let stride = usizes(p, "stride", q.stride, 1)?;
        let pad = usizes(p, "pad", q.pad, 0)?;
        if !global {
            if kernel.is_empty() {
                return Err(p.error(
                    "kernel",
                    "1 to 3 sizes (required unless global_pool=True)",
                    "()",
                ));
            }
            for (name, v) in [("stride", &stride), ("pad", &pad)] {
                if !v.is_empty() && v.len() != kernel.len() {
                    return Err(p.error(
                        name,
                        &format!("{} value(s), one per kernel axis", kernel.len()),
                        format!("{v:?}"),
                    ));
                }
            }
            if convention == PoolConvention::Same
                && (kernel.len() != 1 || pad.iter().any(|&x| x != 0))
            {
                return Err(p.error(
                    "pooling_convention",
                    "\"same\" only with a 1-D kernel and no pad (as in MXNet)",
                    "same",
                ));
            }
        }
        let layout = q.layout;
        Ok(Arc::new(Pooling {
            kind,
            global,
            convention,
            kernel,
            stride,
            pad,
            layout: (layout != "None").then_some(layout),
        }))
    }

    fn geometry(&self, node: &str, data: &[usize]) -> Result<(PoolGeom, Vec<usize>)> {
        let bad = |expected: String| {
            Error::shape(
                OP,
                format!("node \"{node}\": input \"data\""),
                expected,
                data,
            )
        };
        let nd = if self.global {
            data.len().saturating_sub(2)
        } else {
            self.kernel.len()
        };
        if data.len() != nd + 2 || !(1..=3).contains(&nd) {
            return Err(bad(if self.global {
                "3-D to 5-D input (batch, channel, *spatial)".into()
            } else {
                format!(
                    "{}-D input (batch, channel, {nd} spatial axes) for a {nd}-D kernel",
                    nd + 2
                )
            }));
        }
        if let Some(l) = &self.layout {
            let want = ["NCW", "NCHW", "NCDHW"][nd - 1];
            if l != want {
                return Err(Error::invalid(
                    format!("{OP} node \"{node}\": parameter \"layout\""),
                    format!("None or {want} (channel-first for {nd}-D data; channel-last layouts are not supported)"),
                    l.clone(),
                ));
            }
        }
        let spatial = &data[2..];
        let (kernel, stride, pad) = if self.global {
            (spatial.to_vec(), vec![1; nd], vec![0; nd])
        } else {
            let or = |v: &Vec<usize>, d: usize| if v.is_empty() { vec![d; nd] } else { v.clone() };
            (self.kernel.clone(), or(&self.stride, 1), or(&self.pad, 0))
        };
        let mut out = Vec::with_capacity(nd);
        for i in 0..nd {
            let conv = if self.global {
                PoolConvention::Valid
            } else {
                self.convention
            };
            out.push(
                pool_out_size(spatial[i], kernel[i], stride[i], pad[i], conv).ok_or_else(|| {
                    bad(format!(
                        "spatial sizes + 2·pad {pad:?} at least the kernel {kernel:?}"
                    ))
                })?,
            );
        }
        let mut out_shape = data[..2].to_vec();
        out_shape.extend(&out);
        let g = PoolGeom {
            planes: data[0] * data[1],
            input: to3(spatial, 1),
            output: to3(&out, 1),
            kernel: to3(&kernel, 1),
            stride: to3(&stride, 1),
            pad: to3(&pad, 0),
        };
        Ok((g, out_shape))
    }
}

impl Pooling {
    // MXNet 1.9.1's (oneDNN) max pooling has a hidden second output, its workspace, and
    // JSON files count it in `node_row_ptr`; mxfn keeps the count so files round-trip
    // exactly, and fills the slot with the output itself (no extra memory).
    fn has_workspace(&self) -> bool {
        matches!(self.kind, PoolKind::Max)
    }
}

impl Operator for Pooling {
    fn arguments(&self) -> Vec<String> {
        vec!["data".into()]
    }

    fn num_outputs(&self) -> usize {
        if self.has_workspace() {
            2
        } else {
            1
        }
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let data = known(OP, node, &["data"], inputs, 0)?;
        let out = self.geometry(node, data)?.1;
        Ok(vec![out; self.num_outputs()])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let data = inputs
            .first()
            .ok_or_else(|| Error::Msg("internal: Pooling needs data".into()))?;
        let (g, out_shape) = self.geometry(ctx.node, data.shape())?;
        let x = data.f32s("Pooling: data")?;
        // SAFETY: every pooling path assigns each output once, reading none before
        // (a window's running value lives in a register or is started in place).
        let y = unsafe {
            par::overwritten(out_shape.iter().product(), |y| {
                pool_forward(&g, self.kind, x, y)
            })
        }?;
        let out = NDArray::from_f32(&out_shape, y)?;
        Ok(vec![out; self.num_outputs()])
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let (data, out, head) = match (inputs, outputs, out_grads) {
            ([d, ..], [o, ..], [h, ..]) => (d, o, h),
            _ => return Err(Error::Msg("internal: Pooling backward inputs".into())),
        };
        let (g, _) = self.geometry(ctx.node, data.shape())?;
        let x = data.f32s("Pooling: data")?;
        let y = out.f32s("Pooling: output")?;
        let dy = head.f32s("Pooling: output gradient")?;
        let mut dx = vec![0.0f32; x.len()];
        pool_backward(&g, self.kind, x, y, dy, &mut dx)?;
        Ok(vec![Some(NDArray::from_f32(data.shape(), dx)?)])
    }
}
