//! The executor group: how a batch is split over the bound contexts (MXNet's
//! `_split_input_slice`), sliced per device, and how per-device outputs, input gradients and
//! parameter gradients are read back and merged.

use super::*;

/// MXNet's `_split_input_slice`: the `[begin, end)` range of the batch for every device.
pub fn split_input_slice(batch_size: usize, workload: &[f64]) -> Result<Vec<(usize, usize)>> {
    let total: f64 = workload.iter().sum();
    let mut nums: Vec<usize> = workload
        .iter()
        .map(|w| (w * batch_size as f64 / total).round_ties_even().max(0.0) as usize)
        .collect();
    let sum: usize = nums.iter().sum();
    if sum < batch_size {
        if let Some(last) = nums.last_mut() {
            *last += batch_size - sum;
        }
    }
    let mut out = Vec::with_capacity(nums.len());
    let mut end = 0usize;
    for n in nums {
        let begin = end.min(batch_size);
        end = (begin + n).min(batch_size);
        if begin >= end {
            return Err(Error::invalid(
                "module.bind: workload_list",
                format!(
                    "a split of the batch of {batch_size} with no empty slice over {} contexts",
                    workload.len()
                ),
                "too many slices (some splits are empty)",
            ));
        }
        out.push((begin, end));
    }
    Ok(out)
}

pub(super) fn slice_batch(a: &NDArray, d: &DataDesc, b: usize, e: usize) -> Result<NDArray> {
    match d.batch_axis() {
        Some(ax) if !(b == 0 && a.shape().get(ax) == Some(&e)) => {
            a.slice_axis(ax as isize, b as isize, Some(e as isize))
        }
        _ => Ok(a.clone()),
    }
}

pub(super) fn merge(v: &[NDArray]) -> Result<NDArray> {
    merge_along(v, Some(0))
}

/// MXNet's `_merge_multi_context`: the per-device arrays concatenated along `axis`; without
/// a batch axis (`None`) every device holds the whole array and the first one is it.
pub(super) fn merge_along(v: &[NDArray], axis: Option<usize>) -> Result<NDArray> {
    match (v, axis) {
        ([one], _) => Ok(one.clone()),
        ([first, ..], None) => Ok(first.clone()),
        (_, Some(ax)) => NDArray::concat(v, ax as isize),
        ([], None) => Err(Error::Msg("internal: merging no arrays".into())),
    }
}

impl Module {
    /// Per-device input shapes for `slices`.
    pub(super) fn sliced_shapes(
        &self,
        data: &[DataDesc],
        label: &[DataDesc],
        slices: &[(usize, usize)],
    ) -> Vec<HashMap<String, Vec<usize>>> {
        slices
            .iter()
            .map(|&(b, e)| {
                data.iter()
                    .chain(label.iter().filter(|d| self.label_names.contains(&d.name)))
                    .map(|d| {
                        let mut s = d.shape.clone();
                        if let Some(a) = d.batch_axis() {
                            if a < s.len() {
                                s[a] = e - b;
                            }
                        }
                        (d.name.clone(), s)
                    })
                    .collect()
            })
            .collect()
    }

    /// The whole-batch `labels` cut into each device's slice, along each label's batch axis
    /// (its desc's layout; axis 0 without one), as MXNet's `update_metric` does.
    pub fn device_labels(&self, labels: &[NDArray]) -> Result<Vec<Vec<NDArray>>> {
        self.need_bound("device_labels")?;
        if self.execs.len() == 1 {
            return Ok(vec![labels.to_vec()]);
        }
        self.slices
            .iter()
            .map(|&(b, e)| {
                labels
                    .iter()
                    .enumerate()
                    .map(|(i, l)| {
                        match self.label_shapes.get(i).map_or(Some(0), |d| d.batch_axis()) {
                            Some(ax) => l.slice_axis(ax as isize, b as isize, Some(e as isize)),
                            None => Ok(l.clone()),
                        }
                    })
                    .collect()
            })
            .collect()
    }

    /// The `[begin, end)` batch slice of every device.
    pub fn slices(&self) -> &[(usize, usize)] {
        &self.slices
    }

    /// The labels of the last forward batch.
    pub fn last_labels(&self) -> &[NDArray] {
        &self.last_labels
    }

    /// Outputs per output, per device.
    pub fn outputs(&self) -> Result<Vec<Vec<NDArray>>> {
        self.need_bound("outputs")?;
        if !self.forwarded {
            return Err(lifecycle("outputs", "forward"));
        }
        Ok((0..self.output_names.len())
            .map(|i| {
                self.execs
                    .iter()
                    .filter_map(|e| e.outputs().get(i).cloned())
                    .collect()
            })
            .collect())
    }

    /// Outputs concatenated over the devices along each output's batch axis (where the
    /// `__layout__` attribute of its node has `N`; axis 0 without one).
    pub fn outputs_merged(&self) -> Result<Vec<NDArray>> {
        let axes = self.output_batch_axes();
        self.outputs()?
            .into_iter()
            .enumerate()
            .map(|(i, v)| merge_along(&v, axes.get(i).copied().unwrap_or(Some(0))))
            .collect()
    }

    /// Gradients of the data inputs per input (in `data_names` order), per device.
    pub fn input_grads(&self) -> Result<Vec<Vec<NDArray>>> {
        self.need_bound("input_grads")?;
        if !self.inputs_need_grad {
            return Err(lifecycle("input_grads", "bind with inputs_need_grad=true"));
        }
        self.data_names
            .iter()
            .map(|n| {
                self.execs
                    .iter()
                    .map(|e| {
                        e.grad(n)?
                            .cloned()
                            .ok_or_else(|| lifecycle("input_grads", "backward"))
                    })
                    .collect()
            })
            .collect()
    }

    /// Input gradients merged over the devices (along each data input's batch axis).
    pub fn input_grads_merged(&self) -> Result<Vec<NDArray>> {
        let axes: Vec<Option<usize>> = self.data_shapes.iter().map(|d| d.batch_axis()).collect();
        self.input_grads()?
            .into_iter()
            .enumerate()
            .map(|(i, v)| merge_along(&v, axes.get(i).copied().unwrap_or(Some(0))))
            .collect()
    }

    /// Gradient arrays per parameter (in `param_names` order), per device; fixed params give
    /// no arrays.
    pub fn grad_arrays(&self) -> Result<Vec<Vec<NDArray>>> {
        self.need_bound("grad_arrays")?;
        self.param_names
            .iter()
            .map(|n| {
                let mut v = vec![];
                for e in &self.execs {
                    if let Some(g) = e.grad(n)? {
                        v.push(g.clone());
                    }
                }
                Ok(v)
            })
            .collect()
    }

    /// What a monitor reports for this module at the end of a step, device by device as
    /// MXNet's `Monitor.toc` walks each executor: every argument (data and label included),
    /// each followed by its gradient `{arg}_grad` if a backward computed one since the last
    /// forward (none after a forward-only step), then every auxiliary state.
    pub fn monitored_arrays(&self) -> Result<Vec<(String, NDArray)>> {
        self.need_bound("monitored_arrays")?;
        let mut out = Vec::new();
        for e in &self.execs {
            for n in e.arg_names() {
                out.push((n.clone(), e.arg(n)?.clone()));
                if let (true, Some(g)) = (e.grads_fresh(), e.grad(n)?) {
                    out.push((format!("{n}_grad"), g.clone()));
                }
            }
            for (n, a) in e.aux_names().iter().zip(&e.aux_arrays) {
                out.push((n.clone(), a.clone()));
            }
        }
        Ok(out)
    }
}
