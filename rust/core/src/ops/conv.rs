//! Convolution and Deconvolution (1-D, 2-D and 3-D, channel-first layouts), over the im2col +
//! GEMM kernels of `kernels::conv`.

use super::{
    check_or_fill, known, over_output, ChannelAffine, Epilogue, InPlace, InputMap, MaybeShape,
    OpCtx, OpDef, Operator, Params, Prepared,
};
use crate::error::{Error, Result};
use crate::kernels::conv::{
    add_channel_bias, channel_sums, conv_backward_data, conv_backward_weight, conv_forward,
    conv_forward_packed, conv_forward_tiled, conv_out_size, live_geometry, live_weight,
    packs_weight, tiles_mapped, tiles_weight, ConvGeom, InputMap as KernelMap,
};
use crate::kernels::conv_packed::PackedFilters;
use crate::kernels::conv_tiled::FilterPanels;
use crate::kernels::conv_winograd::{
    conv_forward_winograd, winograd_form, WinogradFilters, WinogradForm,
};
use crate::kernels::par::overwritten;
use crate::kernels::unary::AffineAct;
use crate::tensor::NDArray;
use std::borrow::Cow;
use std::sync::Arc;

/// The activation of an input map as the kernels apply it: relu and clip. `None` for the
/// others (tanh, sigmoid: the executor runs the map's ops first).
fn kernel_act(map: &InputMap) -> Option<AffineAct> {
    match map.then {
        None => Some(AffineAct::Identity),
        Some(InPlace::Unary(u)) if u.name == "relu" => Some(AffineAct::Relu),
        Some(InPlace::Clip { lo, hi }) => Some(AffineAct::Clip { lo, hi }),
        Some(InPlace::Unary(_)) => None,
    }
}

/// A convolution's parameters prepared for inference passes ([`Operator::prepare`]).
struct ConvPrepared {
    /// The weight with a BatchNorm folded in; `None`: the input's own (or only `packed`).
    weight: Option<Vec<f32>>,
    /// The bias with a BatchNorm folded in; `None`: the input's own (or none).
    bias: Option<Vec<f32>>,
    /// The (folded) weight packed for [`conv_forward_packed`], when the geometry runs it.
    packed: Option<PackedFilters>,
    /// The (folded) weight packed for [`conv_forward_tiled`], when the geometry runs it.
    tiled: Option<FilterPanels>,
    /// The (folded) weight transformed for [`conv_forward_winograd`], when the geometry runs
    /// it.
    winograd: Option<WinogradFilters>,
}

/// The environment switch for the Winograd kernels: "0" keeps 3×3 convolutions off them, for
/// results nearer the direct sums' bits (they differ in the last bits); "2" keeps them on 2 × 2
/// tiles, which round less than 4 × 4; "4" runs 4 × 4 tiles wherever Winograd runs.
pub const WINOGRAD_ENV: &str = "MXFN_WINOGRAD";

/// The Winograd form [`WINOGRAD_ENV`] allows for `g`, if any (read at each prepare, so a bind
/// after changing it follows it).
fn allowed_winograd_form(g: &ConvGeom) -> Option<WinogradForm> {
    match std::env::var(WINOGRAD_ENV).as_deref().map(str::trim) {
        Ok("0") => None,
        Ok("2") => winograd_form(g, Some(WinogradForm::F2x2)),
        Ok("4") => winograd_form(g, Some(WinogradForm::F4x4)),
        _ => winograd_form(g, None),
    }
}

const LAYOUTS: &[&str] = &["None", "NCW", "NCHW", "NCDHW", "NWC", "NHWC", "NDHWC"];
const CUDNN_TUNE: &[&str] = &["None", "off", "limited_workspace", "fastest"];

/// The entries of this family.
pub static OPS: &[OpDef] = &[
    OpDef {
        name: "Convolution",
        aliases: &[],
        py_name: None,
        doc: "Computes a (grouped, strided, dilated, zero-padded) convolution over 1, 2 or 3 \
              spatial axes: out[n, f] = bias[f] + Σ_c weight[f, c] ⋆ data[n, c]. Data \
              (batch, channel, *spatial) in NCW / NCHW / NCDHW layout; weight \
              (num_filter, channel/num_group, *kernel); bias (num_filter,). Along each axis \
              the output size is floor((x + 2·pad − dilate·(kernel−1) − 1) / stride) + 1.",
        params: ConvolutionParams::DEFS,
        create: Conv::create_convolution,
        variadic: None,
    },
    OpDef {
        name: "Deconvolution",
        aliases: &[],
        py_name: None,
        doc: "Computes the transposed convolution (the gradient of Convolution with respect \
              to its input) over 1, 2 or 3 spatial axes. Data (batch, channel, *spatial); \
              weight (channel, num_filter/num_group, *kernel); bias (num_filter,), absent by \
              default (no_bias=True). Along each axis the output size is \
              stride·(x − 1) + dilate·(kernel − 1) + 1 − 2·pad + adj, or target_shape when \
              given (pad and adj are then derived from it).",
        params: DeconvolutionParams::DEFS,
        create: Conv::create_deconvolution,
        variadic: None,
    },
];

crate::op_params! {
    struct ConvolutionParams {
        kernel: Shape, "Convolution window size: (w,), (h, w) or (d, h, w).";
        stride: Shape = "()", "Window stride per axis; default 1.";
        dilate: Shape = "()", "Dilation per axis; default 1.";
        pad: Shape = "()", "Zero padding on both sides per axis; default 0.";
        num_filter: Positive, "Number of output channels.";
        num_group: Positive = "1", "Number of channel groups (grouped convolution).";
        workspace: Int = "1024", "Workspace limit in MB (accepted, unused).";
        no_bias: Bool = "False", "Whether to leave out the bias term.";
        cudnn_tune: Enum(CUDNN_TUNE) = "None", "cuDNN tuning mode (accepted, unused).";
        cudnn_off: Bool = "False", "Turn off cuDNN (accepted, unused).";
        layout: Enum(LAYOUTS) = "None", "Data layout; only NCW, NCHW and NCDHW are supported.";
    }
}

crate::op_params! {
    struct DeconvolutionParams {
        kernel: Shape, "Deconvolution window size: (w,), (h, w) or (d, h, w).";
        stride: Shape = "()", "Stride per axis; default 1.";
        dilate: Shape = "()", "Dilation per axis; default 1.";
        pad: Shape = "()", "Padding removed from both sides of the output per axis; default 0.";
        adj: Shape = "()", "Extra size added to one side of the output per axis; default 0.";
        target_shape: Shape = "()", "Output spatial shape; overrides pad and adj when given.";
        num_filter: Positive, "Number of output channels.";
        num_group: Positive = "1", "Number of channel groups.";
        workspace: Int = "512", "Workspace limit in MB (accepted, unused).";
        no_bias: Bool = "True", "Whether to leave out the bias term (default: no bias).";
        cudnn_tune: Enum(CUDNN_TUNE) = "None", "cuDNN tuning mode (accepted, unused).";
        cudnn_off: Bool = "False", "Turn off cuDNN (accepted, unused).";
        layout: Enum(LAYOUTS) = "None", "Data layout; only NCW, NCHW and NCDHW are supported.";
    }
}

impl DeconvolutionParams {
    /// The parameters Convolution shares, with Deconvolution's extras beside them.
    fn split(self) -> (ConvolutionParams, Vec<i64>, Vec<i64>) {
        let shared = ConvolutionParams {
            kernel: self.kernel,
            stride: self.stride,
            dilate: self.dilate,
            pad: self.pad,
            num_filter: self.num_filter,
            num_group: self.num_group,
            workspace: self.workspace,
            no_bias: self.no_bias,
            cudnn_tune: self.cudnn_tune,
            cudnn_off: self.cudnn_off,
            layout: self.layout,
        };
        (shared, self.adj, self.target_shape)
    }
}

/// A parsed Convolution or Deconvolution.
#[derive(Debug)]
struct Conv {
    op: &'static str,
    deconv: bool,
    kernel: Vec<usize>,
    stride: Vec<usize>,
    dilate: Vec<usize>,
    pad: Vec<usize>,
    /// Deconvolution only (zeros for Convolution).
    adj: Vec<usize>,
    /// Deconvolution only: the requested output spatial shape.
    target: Option<Vec<usize>>,
    num_filter: usize,
    num_group: usize,
    no_bias: bool,
}

/// A per-axis tuple parameter: `()` means `default` on every axis; otherwise one value per
/// kernel axis, each at least `min`.
fn per_axis(
    p: &Params,
    name: &str,
    v: Vec<i64>,
    nd: usize,
    default: usize,
    min: i64,
) -> Result<Vec<usize>> {
    if v.is_empty() {
        return Ok(vec![default; nd]);
    }
    if v.len() != nd || v.iter().any(|&x| x < min) {
        return Err(p.error(
            name,
            &format!("{nd} value(s) >= {min}, one per kernel axis"),
            format!("{v:?}"),
        ));
    }
    Ok(v.into_iter().map(|x| x as usize).collect())
}

/// Left-pads a per-axis tuple to three axes with `fill` (1-D and 2-D run as 3-D).
fn to3(v: &[usize], fill: usize) -> [usize; 3] {
    let mut out = [fill; 3];
    let start = 3 - v.len().min(3);
    out[start..].copy_from_slice(&v[v.len().saturating_sub(3)..]);
    out
}

impl Conv {
    fn create_convolution(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(Conv::parse(p, false)?))
    }

    fn create_deconvolution(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(Conv::parse(p, true)?))
    }

    fn parse(p: &Params, deconv: bool) -> Result<Conv> {
        let (q, adj, target_shape) = if deconv {
            DeconvolutionParams::from_params(p)?.split()
        } else {
            (ConvolutionParams::from_params(p)?, Vec::new(), Vec::new())
        };
        let k = q.kernel;
        if k.is_empty() || k.len() > 3 || k.iter().any(|&x| x < 1) {
            return Err(p.error("kernel", "1 to 3 sizes >= 1, e.g. (3, 3)", format!("{k:?}")));
        }
        let nd = k.len();
        let kernel: Vec<usize> = k.into_iter().map(|x| x as usize).collect();
        let (num_filter, num_group) = (q.num_filter, q.num_group);
        if num_filter % num_group != 0 {
            return Err(p.error(
                "num_filter",
                &format!("a multiple of num_group ({num_group})"),
                num_filter,
            ));
        }
        let layout = q.layout;
        let want = ["NCW", "NCHW", "NCDHW"][nd - 1];
        if layout != "None" && layout != want {
            return Err(p.error(
                "layout",
                &format!("None or {want} (channel-first, matching the {nd}-D kernel; channel-last layouts are not supported)"),
                &layout,
            ));
        }
        let (adj, target) = if deconv {
            let adj = per_axis(p, "adj", adj, nd, 0, 0)?;
            let t = target_shape;
            // MXNet treats an all-zero target_shape like an absent one.
            let target = if t.iter().all(|&x| x == 0) {
                None
            } else if t.len() == nd && t.iter().all(|&x| x > 0) {
                Some(t.into_iter().map(|x| x as usize).collect())
            } else {
                return Err(p.error(
                    "target_shape",
                    &format!("() or {nd} sizes >= 1, one per kernel axis"),
                    format!("{t:?}"),
                ));
            };
            (adj, target)
        } else {
            (vec![0; nd], None)
        };
        Ok(Conv {
            op: if deconv {
                "Deconvolution"
            } else {
                "Convolution"
            },
            deconv,
            stride: per_axis(p, "stride", q.stride, nd, 1, 1)?,
            dilate: per_axis(p, "dilate", q.dilate, nd, 1, 1)?,
            pad: per_axis(p, "pad", q.pad, nd, 0, 0)?,
            kernel,
            adj,
            target,
            num_filter,
            num_group,
            no_bias: q.no_bias,
        })
    }

    fn nd(&self) -> usize {
        self.kernel.len()
    }

    fn dilated(&self, i: usize) -> usize {
        self.dilate[i] * (self.kernel[i] - 1) + 1
    }

    fn data_error(&self, node: &str, expected: impl std::fmt::Debug, got: &[usize]) -> Error {
        Error::shape(
            self.op,
            format!("node \"{node}\": input \"data\""),
            expected,
            got,
        )
    }

    /// The effective per-axis (pad, adj) of a Deconvolution: from target_shape when given
    /// (MXNet's InferPad: total = stride·(x−1) + dilated kernel − target, adj = total mod 2,
    /// pad = ⌈total/2⌉), else the parameters.
    fn deconv_pad(&self, node: &str, data: &[usize]) -> Result<(Vec<usize>, Vec<usize>)> {
        let Some(target) = &self.target else {
            return Ok((self.pad.clone(), self.adj.clone()));
        };
        let mut pad = Vec::with_capacity(self.nd());
        let mut adj = Vec::with_capacity(self.nd());
        for (i, &t) in target.iter().enumerate() {
            let x = data[2 + i];
            let full = self.stride[i] * x.saturating_sub(1) + self.dilated(i);
            if full < t {
                return Err(Error::shape(
                    self.op,
                    format!("node \"{node}\": target_shape for input \"data\""),
                    format!("a target_shape of at most {full} on axis {i}"),
                    target,
                ));
            }
            let total = full - t;
            adj.push(total % 2);
            pad.push(total.div_ceil(2));
        }
        Ok((pad, adj))
    }

    /// Checks the data shape and returns the geometry (for Deconvolution: of the convolution
    /// whose image is the deconvolution's output) and the output shape.
    fn geometry(&self, node: &str, data: &[usize]) -> Result<(ConvGeom, Vec<usize>)> {
        let nd = self.nd();
        if data.len() != nd + 2 {
            return Err(self.data_error(
                node,
                format!(
                    "{}-D input (batch, channel, {nd} spatial axes) for a {nd}-D kernel",
                    nd + 2
                ),
                data,
            ));
        }
        let (n, c) = (data[0], data[1]);
        if c % self.num_group != 0 {
            return Err(self.data_error(
                node,
                format!("channels divisible by num_group={}", self.num_group),
                data,
            ));
        }
        let spatial = &data[2..];
        let mut out_spatial = Vec::with_capacity(nd);
        let pad = if self.deconv {
            let (pad, adj) = self.deconv_pad(node, data)?;
            for (i, &x) in spatial.iter().enumerate() {
                let full = self.stride[i] * x.saturating_sub(1) + self.dilated(i) + adj[i];
                if full <= 2 * pad[i] || x == 0 {
                    return Err(self.data_error(
                        node,
                        format!("spatial sizes giving a positive output (pad {:?})", pad),
                        data,
                    ));
                }
                out_spatial.push(full - 2 * pad[i]);
            }
            pad
        } else {
            for (i, &x) in spatial.iter().enumerate() {
                let o = conv_out_size(
                    x,
                    self.kernel[i],
                    self.stride[i],
                    self.dilate[i],
                    self.pad[i],
                )
                .ok_or_else(|| {
                    self.data_error(
                        node,
                        format!(
                            "spatial sizes + 2·pad {:?} at least the dilated kernel {:?}",
                            self.pad,
                            (0..nd).map(|i| self.dilated(i)).collect::<Vec<_>>()
                        ),
                        data,
                    )
                })?;
                out_spatial.push(o);
            }
            self.pad.clone()
        };
        let mut out_shape = vec![n, self.num_filter];
        out_shape.extend(&out_spatial);
        // Deconvolution is the transpose of the convolution from its output to its input.
        let (channels, filters, image, cols) = if self.deconv {
            (self.num_filter, c, &out_spatial[..], spatial)
        } else {
            (c, self.num_filter, spatial, &out_spatial[..])
        };
        let g = ConvGeom {
            batch: n,
            channels,
            filters,
            groups: self.num_group,
            input: to3(image, 1),
            output: to3(cols, 1),
            kernel: to3(&self.kernel, 1),
            stride: to3(&self.stride, 1),
            dilate: to3(&self.dilate, 1),
            pad: to3(&pad, 0),
        };
        Ok((g, out_shape))
    }

    fn weight_shape(&self, data: &[usize]) -> Vec<usize> {
        let c = data[1];
        let mut w = if self.deconv {
            vec![c, self.num_filter / self.num_group]
        } else {
            vec![self.num_filter, c / self.num_group]
        };
        w.extend(&self.kernel);
        w
    }

    /// The forward pass, with `epilogue` over each block of the output (Convolution only).
    fn forward_with(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        epilogue: Option<&Epilogue>,
    ) -> Result<Vec<NDArray>> {
        let (data, weight) = match inputs {
            [d, w, ..] => (d, w),
            _ => {
                return Err(Error::Msg(format!(
                    "internal: {} needs data and weight",
                    self.op
                )))
            }
        };
        let w = weight.f32s_named(|| format!("{}: weight", self.op))?;
        self.forward_parts(ctx, data, w, self.bias(inputs)?, epilogue)
    }

    /// [`Operator::prepare`], or with `mapped` [`Operator::prepare_mapped`]: a mapped input
    /// is read by the tiled and Winograd kernels alone (they map each value as they gather
    /// it), for the geometries of [`tiles_mapped`] and [`winograd_form`].
    fn prepare_for(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        affine: Option<&ChannelAffine>,
        mapped: bool,
    ) -> Option<Result<Prepared>> {
        if self.deconv || affine.is_some_and(|a| a.scale.len() != self.num_filter) {
            return None;
        }
        let (full, _) = match self.geometry(ctx.node, inputs.first()?.shape()) {
            Ok(g) => g,
            Err(e) => return Some(Err(e)),
        };
        // The packed kernels run without the taps that only read padding (a 3×3 window over
        // a 1×1 image keeps its centre): their weight is cut once here.
        let g = live_geometry(&full);
        // Winograd's input transform maps the input as it reads it, like the tiled gathers.
        let wino = allowed_winograd_form(&g);
        let (pack, tile) = match mapped {
            _ if wino.is_some() => (false, false),
            true if tiles_mapped(&g) => (false, true),
            true => return None,
            false => (packs_weight(&g), tiles_weight(&g)),
        };
        if affine.is_none() && !pack && !tile && wino.is_none() {
            return None;
        }
        let prepare = || -> Result<Prepared> {
            let weight = inputs
                .get(1)
                .ok_or_else(|| Error::Msg(format!("internal: {} inputs", self.op)))?;
            let w = weight.f32s_named(|| format!("{}: weight", self.op))?;
            let bias = self.bias(inputs)?;
            let (w, bias) = match affine {
                // conv(x, w)·s + t = conv(x, w·s) + (b·s + t), per filter: the BatchNorm pass
                // disappears into the weights and the bias.
                Some(a) => {
                    let mut w = w.to_vec();
                    let per_filter = (w.len() / self.num_filter).max(1);
                    for (row, &s) in w.chunks_mut(per_filter).zip(&a.scale) {
                        row.iter_mut().for_each(|v| *v *= s);
                    }
                    let b: Vec<f32> = (0..self.num_filter)
                        .map(|f| bias.map_or(0.0, |b| b[f]) * a.scale[f] + a.shift[f])
                        .collect();
                    (Cow::Owned(w), Some(b))
                }
                None => (Cow::Borrowed(w), None),
            };
            let cut = (pack || tile).then(|| live_weight(&full, &w)).flatten();
            let w = cut.map_or(w, Cow::Owned);
            let packed = pack.then(|| PackedFilters::new(&w, self.num_filter, g.col_rows()));
            let tiled = tile.then(|| FilterPanels::new(&w, self.num_filter, g.col_rows()));
            let winograd =
                wino.map(|form| WinogradFilters::new(&w, self.num_filter, g.channels, form));
            Ok(Arc::new(ConvPrepared {
                // A packed copy is all the kernels read.
                weight: match (pack || tile || wino.is_some(), w) {
                    (false, Cow::Owned(w)) => Some(w),
                    _ => None,
                },
                bias,
                packed,
                tiled,
                winograd,
            }))
        };
        Some(prepare())
    }

    /// The forward pass from prepared parameters, the data mapped by `map` as the tiled and
    /// Winograd kernels read it (a state made for a mapped input has one of their weights,
    /// and no other).
    fn run_prepared(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        p: &ConvPrepared,
        map: Option<&KernelMap>,
        epilogue: Option<&Epilogue>,
    ) -> Result<Vec<NDArray>> {
        let data = inputs
            .first()
            .ok_or_else(|| Error::Msg(format!("internal: {} inputs", self.op)))?;
        let bias = match &p.bias {
            Some(b) => Some(b.as_slice()),
            None => self.bias(inputs)?,
        };
        // A packed weight: its kernel writes the whole output (then the epilogue).
        type Packed<'a> = &'a dyn Fn(&ConvGeom, &[f32], &mut [f32]) -> Result<()>;
        let packed: Option<Packed> = match (&p.winograd, &p.packed, &p.tiled) {
            (Some(w), _, _) => Some(&|g, x, y| {
                let e = epilogue.map(|e| over_output(e, y));
                conv_forward_winograd(g, x, map, w, bias, y, e.as_ref().map(|e| e as _))
            }),
            (None, Some(w), _) if map.is_none() => Some(&|g, x, y| {
                let e = epilogue.map(|e| over_output(e, y));
                conv_forward_packed(g, x, w, bias, y, e.as_ref().map(|e| e as _))
            }),
            (None, _, Some(w)) => Some(&|g, x, y| {
                let e = epilogue.map(|e| over_output(e, y));
                conv_forward_tiled(g, x, map, w, bias, y, e.as_ref().map(|e| e as _))
            }),
            _ if map.is_some() => {
                return Err(Error::Msg(format!(
                    "internal: {} mapped input without a tiled weight",
                    self.op
                )))
            }
            _ => None,
        };
        if let Some(run) = packed {
            let (g, out_shape) = self.geometry(ctx.node, data.shape())?;
            let g = live_geometry(&g);
            let x = data.f32s_named(|| format!("{}: data", self.op))?;
            // SAFETY: the packed, tiled and Winograd kernels write the whole output.
            let y = unsafe { overwritten(out_shape.iter().product(), |y| run(&g, x, y)) }?;
            return Ok(vec![NDArray::from_f32(&out_shape, y)?]);
        }
        let w = match &p.weight {
            Some(w) => w.as_slice(),
            None => inputs
                .get(1)
                .ok_or_else(|| Error::Msg(format!("internal: {} inputs", self.op)))?
                .f32s_named(|| format!("{}: weight", self.op))?,
        };
        self.forward_parts(ctx, data, w, bias, epilogue)
    }

    /// The bias input's values, unless no_bias.
    fn bias<'a>(&self, inputs: &'a [NDArray]) -> Result<Option<&'a [f32]>> {
        match (self.no_bias, inputs.get(2)) {
            (false, Some(b)) => Ok(Some(b.f32s_named(|| format!("{}: bias", self.op))?)),
            _ => Ok(None),
        }
    }

    /// [`Self::forward_with`] on weight and bias values.
    fn forward_parts(
        &self,
        ctx: &OpCtx,
        data: &NDArray,
        w: &[f32],
        bias: Option<&[f32]>,
        epilogue: Option<&Epilogue>,
    ) -> Result<Vec<NDArray>> {
        let (g, out_shape) = self.geometry(ctx.node, data.shape())?;
        let x = data.f32s_named(|| format!("{}: data", self.op))?;
        let fill = |y: &mut [f32]| -> Result<()> {
            if self.deconv {
                conv_backward_data(&g, x, w, y)?;
                if let Some(b) = bias {
                    add_channel_bias(y, self.num_filter, g.in_len(), b)?;
                }
                Ok(())
            } else {
                let e = epilogue.map(|e| over_output(e, y));
                conv_forward(&g, x, w, bias, y, e.as_ref().map(|e| e as _))
            }
        };
        // SAFETY: both kernels overwrite their whole output before reading it.
        let y = unsafe { overwritten(out_shape.iter().product(), fill) }?;
        Ok(vec![NDArray::from_f32(&out_shape, y)?])
    }
}

impl Operator for Conv {
    fn arguments(&self) -> Vec<String> {
        let mut a = vec!["data".to_string(), "weight".to_string()];
        if !self.no_bias {
            a.push("bias".into());
        }
        a
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let data = known(self.op, node, &["data"], inputs, 0)?.to_vec();
        let (_, out) = self.geometry(node, &data)?;
        if let Some(slot) = inputs.get_mut(1) {
            check_or_fill(self.op, node, "weight", slot, &self.weight_shape(&data))?;
        }
        if !self.no_bias {
            if let Some(slot) = inputs.get_mut(2) {
                check_or_fill(self.op, node, "bias", slot, &[self.num_filter])?;
            }
        }
        Ok(vec![out])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        self.forward_with(ctx, inputs, None)
    }

    fn forward_then(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
        epilogue: &Epilogue,
    ) -> Option<Result<Vec<NDArray>>> {
        // Deconvolution adds its bias after the whole transposed pass: no blocks to fuse into.
        (!self.deconv).then(|| self.forward_with(ctx, inputs, Some(epilogue)))
    }

    fn forward_affine(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        affine: &ChannelAffine,
        epilogue: Option<&Epilogue>,
    ) -> Option<Result<Vec<NDArray>>> {
        let prepared = match self.prepare(ctx, inputs, Some(affine))? {
            Ok(p) => p,
            Err(e) => return Some(Err(e)),
        };
        self.forward_prepared(ctx, inputs, &prepared, epilogue)
    }

    fn prepare(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        affine: Option<&ChannelAffine>,
    ) -> Option<Result<Prepared>> {
        self.prepare_for(ctx, inputs, affine, false)
    }

    fn prepare_mapped(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        affine: Option<&ChannelAffine>,
        map: &InputMap,
    ) -> Option<Result<Prepared>> {
        kernel_act(map)?;
        self.prepare_for(ctx, inputs, affine, true)
    }

    fn forward_prepared_mapped(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        prepared: &Prepared,
        map: &InputMap,
        epilogue: Option<&Epilogue>,
    ) -> Option<Result<Vec<NDArray>>> {
        let p = prepared.downcast_ref::<ConvPrepared>()?;
        p.tiled.as_ref()?;
        let map = KernelMap {
            scale: &map.affine.scale,
            shift: &map.affine.shift,
            act: kernel_act(map)?,
        };
        Some(self.run_prepared(ctx, inputs, p, Some(&map), epilogue))
    }

    fn forward_prepared(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        prepared: &Prepared,
        epilogue: Option<&Epilogue>,
    ) -> Option<Result<Vec<NDArray>>> {
        let p = prepared.downcast_ref::<ConvPrepared>()?;
        Some(self.run_prepared(ctx, inputs, p, None, epilogue))
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let (data, weight, head) = match (inputs, out_grads) {
            ([d, w, ..], [h, ..]) => (d, w, h),
            _ => return Err(Error::Msg(format!("internal: {} backward inputs", self.op))),
        };
        let (g, _) = self.geometry(ctx.node, data.shape())?;
        let x = data.f32s_named(|| format!("{}: data", self.op))?;
        let w = weight.f32s_named(|| format!("{}: weight", self.op))?;
        let dy = head.f32s_named(|| format!("{}: output gradient", self.op))?;
        // A first layer's data gradient (col2im and a GEMM) is skipped when unused.
        let dx = if ctx.needs_grad(0) {
            let fill = |dx: &mut [f32]| {
                if self.deconv {
                    // The data gradient of a transposed convolution is the convolution itself.
                    conv_forward(&g, dy, w, None, dx, None)
                } else {
                    conv_backward_data(&g, dy, w, dx)
                }
            };
            // SAFETY: both kernels overwrite their whole output before reading it.
            let dx = unsafe { overwritten(x.len(), fill) }?;
            Some(NDArray::from_f32(data.shape(), dx)?)
        } else {
            None
        };
        // Convolution's bias gradient comes out of the weight-gradient pass (its blocks of
        // dy are in cache there); Deconvolution's bias lives on the image side.
        let fused_bias = !self.no_bias && !self.deconv && ctx.needs_grad(1);
        let mut db = fused_bias.then(|| vec![0.0f32; self.num_filter]);
        let dw = if ctx.needs_grad(1) {
            let fill = |dw: &mut [f32]| {
                if self.deconv {
                    conv_backward_weight(&g, dy, x, dw, None)
                } else {
                    conv_backward_weight(&g, x, dy, dw, db.as_deref_mut())
                }
            };
            // SAFETY: the weight gradient is written whole (its first block's products
            // overwrite, or the lanes' sums go into a zeroed array).
            let dw = unsafe { overwritten(w.len(), fill) }?;
            Some(NDArray::from_f32(weight.shape(), dw)?)
        } else {
            None
        };
        let mut grads = vec![dx, dw];
        if !self.no_bias {
            let db = match db {
                Some(db) => db,
                None => {
                    let spatial = if self.deconv { g.in_len() } else { g.out_len() };
                    channel_sums(dy, self.num_filter, spatial)?
                }
            };
            grads.push(Some(NDArray::from_f32(&[self.num_filter], db)?));
        }
        Ok(grads)
    }
}
