//! Creation operators: MXNet `_zeros`, `_ones` and `_full` — an array of a given shape and
//! dtype from no input (what `mx.sym.zeros/ones/full` build, and the begin states of exported
//! recurrent models). The shape is sized against the limits policy when the node is made.

use super::{MaybeShape, OpCtx, OpDef, Operator, Params};
use crate::error::Result;
use crate::tensor::{DType, NDArray};
use std::sync::Arc;

/// The dtypes a creation op takes (MXNet's names).
const DTYPES: &[&str] = &[
    "float32", "float64", "float16", "uint8", "int8", "int32", "int64",
];

crate::op_params! {
    /// `_zeros` and `_ones`.
    struct FillParams {
        shape: Shape = "()", "The output shape; a 0 size is inferred from the nodes that use it (in a graph).";
        ctx: Str = "", "Ignored (MXNet's device string).";
        dtype: Enum(DTYPES) = "float32", "The element type.";
    }
}

crate::op_params! {
    /// `_full`: a fill with its value.
    struct FullParams {
        shape: Shape = "()", "The output shape; a 0 size is inferred from the nodes that use it (in a graph).";
        ctx: Str = "", "Ignored (MXNet's device string).";
        dtype: Enum(DTYPES) = "float32", "The element type.";
        value: Float, "The value of every element.";
    }
}

#[derive(Debug)]
struct Fill {
    shape: Vec<usize>,
    dtype: DType,
    value: f64,
}

/// `value`: the fill of `_zeros`/`_ones`; `None` for `_full`, which takes it as a parameter.
fn create(p: &Params, value: Option<f64>) -> Result<Arc<dyn Operator>> {
    let (shape, dtype, value) = match value {
        Some(v) => {
            let q = FillParams::from_params(p)?;
            (q.shape, q.dtype, v)
        }
        None => {
            let q = FullParams::from_params(p)?;
            (q.shape, q.dtype, q.value)
        }
    };
    let mut dims = Vec::with_capacity(shape.len());
    for &d in &shape {
        if d < 0 {
            return Err(p.error(
                "shape",
                "sizes >= 0 (0: inferred from the nodes that use it, as in MXNet)",
                crate::error::tuple_text(&format!("{shape:?}")),
            ));
        }
        dims.push(d as usize);
    }
    let dtype = DType::parse(&dtype)?;
    crate::limits::array_bytes(
        &format!("{} node \"{}\": shape", p.op, p.node),
        &dims,
        dtype.size(),
    )?;
    Ok(Arc::new(Fill {
        shape: dims,
        dtype,
        value,
    }))
}

impl Operator for Fill {
    fn dtype_generic(&self) -> bool {
        true
    }
    fn partial_output_shape(&self) -> Option<Vec<usize>> {
        self.shape.contains(&0).then(|| self.shape.clone())
    }
    fn arguments(&self) -> Vec<String> {
        Vec::new()
    }

    fn infer_shape(
        &self,
        _node: &str,
        _inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        Ok(vec![self.shape.clone()])
    }

    fn infer_type(
        &self,
        _inputs: &mut [Option<DType>],
        _aux: &mut [Option<DType>],
    ) -> Result<Vec<DType>> {
        Ok(vec![self.dtype])
    }

    fn forward(
        &self,
        _ctx: &OpCtx,
        _inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        Ok(vec![NDArray::full(&self.shape, self.value, self.dtype)])
    }

    fn backward(
        &self,
        _ctx: &OpCtx,
        _out_grads: &[NDArray],
        _inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        Ok(Vec::new())
    }
}

/// The entries of this family.
pub static OPS: &[OpDef] = &[
    OpDef {
        name: "_zeros",
        aliases: &[],
        py_name: None,
        doc: "An array of `shape` and `dtype` filled with 0 (`mx.sym.zeros`).",
        params: FillParams::DEFS,
        create: |p| create(p, Some(0.0)),
        variadic: None,
    },
    OpDef {
        name: "_ones",
        aliases: &[],
        py_name: None,
        doc: "An array of `shape` and `dtype` filled with 1 (`mx.sym.ones`).",
        params: FillParams::DEFS,
        create: |p| create(p, Some(1.0)),
        variadic: None,
    },
    OpDef {
        name: "_full",
        aliases: &[],
        py_name: None,
        doc: "An array of `shape` and `dtype` filled with `value` (`mx.sym.full`).",
        params: FullParams::DEFS,
        create: |p| create(p, None),
        variadic: None,
    },
];

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crate::ops::invoke;
    use crate::tensor::DType;
    use std::collections::BTreeMap;

    fn attrs(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn fill_in_the_given_shape_and_dtype() {
        let z = invoke(
            "_zeros",
            attrs(&[("shape", "(2, 3)"), ("dtype", "int64")]),
            vec![],
        )
        .unwrap();
        assert_eq!(
            (z[0].shape(), z[0].dtype()),
            (&[2usize, 3][..], DType::Int64)
        );
        assert_eq!(z[0].to_f64_vec(), vec![0.0; 6]);
        let f = invoke(
            "_full",
            attrs(&[("shape", "(2,)"), ("value", "2.5")]),
            vec![],
        )
        .unwrap();
        assert_eq!(f[0].to_f64_vec(), vec![2.5, 2.5]);
        let o = invoke("_ones", attrs(&[("shape", "(1,)")]), vec![]).unwrap();
        assert_eq!(o[0].to_f64_vec(), vec![1.0]);
    }

    #[test]
    fn negative_or_huge_shapes_are_errors() {
        let e = invoke("_zeros", attrs(&[("shape", "(-1, 3)")]), vec![]).unwrap_err();
        assert!(e.to_string().contains("sizes >= 0"), "{e}");
        // Called directly (no graph to infer it from), a 0 size is an empty array.
        let z = invoke("_zeros", attrs(&[("shape", "(0, 3)")]), vec![]).unwrap();
        assert_eq!(z[0].shape(), &[0, 3]);
        let e = invoke("_ones", attrs(&[("shape", "(1000000000000, 784)")]), vec![]).unwrap_err();
        assert!(e.to_string().contains("MXFN_MAX_BYTES"), "{e}");
        assert!(invoke("_full", attrs(&[("shape", "(2,)")]), vec![]).is_err()); // value required
    }
}
