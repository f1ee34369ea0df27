//! Shape and indexing operators: MXNet `Reshape`, `Flatten`, `transpose`, `expand_dims`,
//! `squeeze`, `Concat`, `_rnn_param_concat`, `stack`, `SliceChannel` (`split`), `slice_axis`,
//! `slice`, `Embedding`, `SwapAxis`, `broadcast_like`, `take`, `pick`, `SequenceMask`,
//! `SequenceLast`, `SequenceReverse`, `reverse` (`flip`).
//!
//! Everything but `Embedding` only moves values, so it works for every dtype: reshapes share
//! the input's storage, the rest copy contiguous blocks (`kernels::copy`) in parallel
//! over the leading (outer) rows.

mod axes;
mod embedding;
mod gather;
mod join;
mod sequence;
mod slice;
mod view;

use super::OpDef;
use crate::error::{Error, Result};
use axes::{BroadcastLike, SwapAxis};
use embedding::Embedding;
use gather::{Pick, Take};
use join::{Concat, SliceChannel, Stack};
use sequence::{SeqOp, Sequence};
pub use slice::parse_opt_tuple;
use slice::{Reverse, Slice, SliceAxis};
use view::{Transpose, View};

// ---------------------------------------------------------------------------------------------
// Registry entries
// ---------------------------------------------------------------------------------------------

/// The entries of this family.
pub static OPS: &[OpDef] = &[
    OpDef {
        name: "Reshape",
        aliases: &["reshape"],
        py_name: None,
        doc: "Gives the data a new shape without changing its values. Besides positive sizes, \
              `shape` takes MXNet's special codes: 0 copies the next input dimension, -1 infers \
              one dimension from the remaining size, -2 copies all remaining input dimensions, \
              -3 merges the next two input dimensions into one, and -4 splits the next input \
              dimension into the two values that follow it (one of which may be -1). With \
              reverse=True the codes are matched against the input dimensions from right to left. \
              Example: data (2, 3, 4) with shape (0, -1) gives (2, 12); (-3, -2) gives (6, 4).",
        params: view::ReshapeParams::DEFS,
        create: View::create_reshape,
        variadic: None,
    },
    OpDef {
        name: "Flatten",
        aliases: &["flatten"],
        py_name: None,
        doc: "Collapses every axis but the first: data of shape (N, d1, d2, …) becomes \
              (N, d1·d2·…). A 1-d input of shape (N,) becomes (N, 1).",
        params: &[],
        create: View::create_flatten,
        variadic: None,
    },
    OpDef {
        name: "expand_dims",
        aliases: &[],
        py_name: None,
        doc: "Inserts an axis of size 1 at position `axis`. A negative axis counts from \
              ndim + 1, so axis=-1 appends a trailing axis.",
        params: view::ExpandDimsParams::DEFS,
        create: View::create_expand_dims,
        variadic: None,
    },
    OpDef {
        name: "squeeze",
        aliases: &[],
        py_name: None,
        doc: "Removes axes of size 1: the listed ones (each must have size 1), or every one \
              when axis is None. A result with no axes left has shape (1,), as in MXNet.",
        params: view::SqueezeParams::DEFS,
        create: View::create_squeeze,
        variadic: None,
    },
    OpDef {
        name: "transpose",
        aliases: &[],
        py_name: None,
        doc: "Permutes the axes: output axis i is input axis axes[i]. With the default empty \
              axes the order of the axes is reversed (a matrix transpose for 2-d data).",
        params: view::Transpose::DEFS,
        create: Transpose::create,
        variadic: None,
    },
    OpDef {
        name: "SwapAxis",
        aliases: &["swapaxes"],
        py_name: None,
        doc: "Swaps axes `dim1` and `dim2` of the data (negative axes count from the end). \
              Example: data (2, 3, 4) with dim1=0, dim2=2 gives (4, 3, 2).",
        params: axes::SwapAxis::DEFS,
        create: SwapAxis::create,
        variadic: None,
    },
    OpDef {
        name: "broadcast_like",
        aliases: &[],
        py_name: None,
        doc: "Broadcasts `lhs` to the shape of `rhs` (axes where `lhs` has size 1 are \
              repeated). With `lhs_axes` and `rhs_axes`, only those axes of `lhs` take the sizes \
              of the matching axes of `rhs`. The gradient of `rhs` is zero: it gives a shape \
              only. Example: lhs (2, 1) and rhs (2, 3) give (2, 3).",
        params: axes::BroadcastLike::DEFS,
        create: BroadcastLike::create,
        variadic: None,
    },
    OpDef {
        name: "take",
        aliases: &[],
        py_name: None,
        doc: "The slices of `a` along `axis` at `indices` (cast to int): the output has `a`'s \
              shape with that axis replaced by the indices' shape. Out-of-range indices are \
              clamped (mode \"clip\"), wrapped (\"wrap\") or an error (\"raise\"); the indices \
              get no gradient. Example: a (4, 3) and indices (2,) give (2, 3).",
        params: gather::TakeParams::DEFS,
        create: Take::create,
        variadic: None,
    },
    OpDef {
        name: "pick",
        aliases: &[],
        py_name: None,
        doc: "One element of `data` along `axis` per position: `index` (cast to int) has the \
              data's shape without that axis (or with size 1 there, and then the output too, \
              with keepdims). Out-of-range indices are clamped (mode \"clip\") or wrapped \
              (\"wrap\"); the index gets no gradient. Example: data (2, 3), index [0, 2] and \
              axis -1 give (data[0, 0], data[1, 2]).",
        params: gather::PickParams::DEFS,
        create: Pick::create,
        variadic: None,
    },
    OpDef {
        name: "SequenceMask",
        aliases: &[],
        py_name: None,
        doc: "Sets every step of a sequence at or past its length to `value` (data is \
              (time, batch, …) with axis=0, (batch, time, …) with axis=1; the lengths come \
              from the `sequence_length` input when use_sequence_length is set, else nothing \
              is masked).",
        params: sequence::SequenceMaskParams::DEFS,
        create: |p| Sequence::create(p, SeqOp::Mask),
        variadic: None,
    },
    OpDef {
        name: "SequenceLast",
        aliases: &[],
        py_name: None,
        doc: "The last step of every sequence (step sequence_length - 1 with \
              use_sequence_length, else the last one): the data without its time axis.",
        params: sequence::SequenceLastParams::DEFS,
        create: |p| Sequence::create(p, SeqOp::Last),
        variadic: None,
    },
    OpDef {
        name: "SequenceReverse",
        aliases: &[],
        py_name: None,
        doc: "Reverses the first sequence_length steps of every sequence (all steps without \
              use_sequence_length), leaving the padding in place; time is axis 0.",
        params: sequence::SequenceReverseParams::DEFS,
        create: |p| Sequence::create(p, SeqOp::Reverse),
        variadic: None,
    },
    OpDef {
        name: "Concat",
        aliases: &["concat"],
        py_name: None,
        doc: "Joins the inputs along axis `dim`; all other dimensions must agree. The inputs \
              are named arg0, arg1, …; the gradient is split back into the inputs' parts.",
        params: join::ConcatParams::DEFS,
        create: Concat::create,
        variadic: Some("num_args"),
    },
    OpDef {
        name: "_rnn_param_concat",
        aliases: &["_npi_rnn_param_concat"],
        py_name: None,
        doc: "Concat as Gluon's recurrent layers use it to join their flattened weights and \
              biases into the RNN operator's `parameters` vector (`dim=0`): the inputs joined \
              along `dim`, the gradient split back into their parts.",
        params: join::ConcatParams::DEFS,
        create: Concat::create,
        variadic: Some("num_args"),
    },
    OpDef {
        name: "stack",
        aliases: &[],
        py_name: None,
        doc: "Joins inputs of one shape along a new axis `axis`: k inputs of shape (a, b) \
              stacked on axis 1 give (a, k, b). The inputs are named arg0, arg1, ….",
        params: join::Stack::DEFS,
        create: Stack::create,
        variadic: Some("num_args"),
    },
    OpDef {
        name: "SliceChannel",
        aliases: &["split"],
        py_name: None,
        doc: "Splits the data into `num_outputs` equal parts along `axis` (the size of that \
              axis must be divisible by num_outputs). With squeeze_axis=True the split axis, \
              which must then have size num_outputs, is removed from the outputs. Outputs are \
              named output0, output1, …; the gradient concatenates the outputs' gradients.",
        params: join::SliceChannel::DEFS,
        create: SliceChannel::create,
        variadic: None,
    },
    OpDef {
        name: "slice_axis",
        aliases: &[],
        py_name: None,
        doc: "Takes elements begin … end-1 along one axis. Negative begin and end count from \
              the end of the axis; end=None means up to the end. The range must not be empty.",
        params: slice::SliceAxis::DEFS,
        create: SliceAxis::create,
        variadic: None,
    },
    OpDef {
        name: "slice",
        aliases: &[],
        py_name: None,
        doc: "Takes a strided region, one (begin, end, step) per leading axis, like Python's \
              x[b0:e0:s0, b1:e1:s1, …]. Entries may be None (the whole axis, reversed for a \
              negative step); negative values count from the end; out-of-range bounds are \
              clipped. Axes beyond the tuples are taken whole.",
        params: slice::SliceParams::DEFS,
        create: Slice::create,
        variadic: None,
    },
    OpDef {
        name: "reverse",
        aliases: &["flip"],
        py_name: None,
        doc: "Reverses the order of the elements along the given axes; the gradient is \
              reversed back. Example: [[1, 2], [3, 4]] with axis=1 gives [[2, 1], [4, 3]].",
        params: slice::Reverse::DEFS,
        create: Reverse::create,
        variadic: None,
    },
    OpDef {
        name: "Embedding",
        aliases: &[],
        py_name: None,
        doc: "Maps integer indices to rows of a weight matrix: output[..., :] = \
              weight[data[...], :], shape data.shape + (output_dim,). The indices are float32 \
              values holding integers (the fraction is dropped). Unlike MXNet, which clips \
              silently, an index outside [0, input_dim) is an error. The weight gradient adds \
              up the head gradients of every occurrence of an index; the indices get no gradient.",
        params: embedding::EmbeddingParams::DEFS,
        create: Embedding::create,
        variadic: None,
    },
];

// ---------------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------------

/// An error about parameter `name` of node `node` that only shows once the input shape is known.
pub(crate) fn bad_param(
    op: &str,
    node: &str,
    name: &str,
    expected: impl Into<String>,
    got: impl Into<String>,
) -> Error {
    Error::invalid(
        format!("{op} node \"{node}\": parameter \"{name}\""),
        expected,
        got,
    )
}

/// Python tuple text of a shape: `(2, 3)`, `(4,)`.
pub(crate) fn tup<T: std::fmt::Debug>(s: &[T]) -> String {
    crate::error::tuple_text(&format!("{s:?}"))
}

/// Normalises a possibly negative axis parameter against `ndim` axes.
pub(crate) fn norm_axis(
    op: &str,
    node: &str,
    pname: &str,
    axis: i64,
    ndim: usize,
) -> Result<usize> {
    let n = ndim as i64;
    let a = if axis < 0 { axis + n } else { axis };
    if a < 0 || a >= n {
        return Err(bad_param(
            op,
            node,
            pname,
            format!("an axis in [{}, {n}) for {ndim}-d input", -n),
            axis.to_string(),
        ));
    }
    Ok(a as usize)
}

/// The input names of a variadic op: arg0, arg1, ….
pub(crate) fn arg_names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("arg{i}")).collect()
}

/// Debug-prints as its text (for `Error::shape` expectations that are not plain shapes).
pub(crate) struct Text(String);

impl std::fmt::Debug for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
