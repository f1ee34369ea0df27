//! State ops derive from their parameters for inference ([`crate::ops::Operator::prepare`]: a
//! convolution's weight with BatchNorm folded in, packed for its kernel), kept between passes
//! while the parameter arrays stay the same. Folding and packing ResNet-50's weights anew on
//! every batch-1 pass copied 100 MB per image.

use crate::error::Result;
use crate::ops::Prepared;
use crate::tensor::NDArray;
use std::sync::Mutex;

/// What one step prepared.
enum Slot {
    /// The op has nothing to prepare for this executor (its decision rests on the bound shapes,
    /// which do not change).
    Declined,
    /// Made from `keys` — the op's parameter arrays, and a folded BatchNorm's parameters and
    /// statistics. They are held, so none of them can change unseen: a write to a held array
    /// copies it first, and [`NDArray::same_storage`] then tells the new value apart.
    Made {
        keys: Vec<NDArray>,
        prepared: Prepared,
        /// A folded BatchNorm's other outputs (its mean and var).
        extra: Vec<NDArray>,
    },
}

/// The prepared state of every step (none until an inference pass makes it).
pub(super) struct PreparedCache(Mutex<Vec<Option<Slot>>>);

/// A prepared state and a folded BatchNorm's other outputs.
pub(super) type Made = (Prepared, Vec<NDArray>);

impl PreparedCache {
    /// An empty cache for `steps` steps.
    pub(super) fn new(steps: usize) -> PreparedCache {
        PreparedCache(Mutex::new((0..steps).map(|_| None).collect()))
    }

    /// Step `si`'s state made from `keys`: the kept one when it was made from these very
    /// arrays, else `make()`'s (kept for the next pass). `None` when the op declines. The
    /// keys are borrowed, and cloned only to be kept: a pass checks every step's.
    pub(super) fn get_or_make<'k>(
        &self,
        si: usize,
        keys: impl Iterator<Item = &'k NDArray> + Clone,
        make: impl FnOnce() -> Option<Result<Made>>,
    ) -> Option<Result<Made>> {
        {
            let slots = self.0.lock().unwrap_or_else(|p| p.into_inner());
            match slots.get(si)? {
                Some(Slot::Declined) => return None,
                Some(Slot::Made {
                    keys: held,
                    prepared,
                    extra,
                }) if held.len() == keys.clone().count()
                    && held
                        .iter()
                        .zip(keys.clone())
                        .all(|(a, b)| a.same_storage(b)) =>
                {
                    return Some(Ok((prepared.clone(), extra.clone())));
                }
                _ => {}
            }
        }
        // Made outside the lock: folding and packing take a while, and nothing else waits.
        let made = make();
        let slot = match &made {
            None => Slot::Declined,
            Some(Ok((prepared, extra))) => Slot::Made {
                keys: keys.cloned().collect(),
                prepared: prepared.clone(),
                extra: extra.clone(),
            },
            // Not kept: the next pass tries again (and reports the error again).
            Some(Err(_)) => return made,
        };
        let mut slots = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = slots.get_mut(si) {
            *s = Some(slot);
        }
        made
    }

    /// Forgets every prepared state (its memory returns to the allocator).
    pub(super) fn clear(&self) {
        let mut slots = self.0.lock().unwrap_or_else(|p| p.into_inner());
        slots.iter_mut().for_each(|s| *s = None);
    }

    /// The addresses of the states kept, step by step (`None`: nothing kept): tests tell a
    /// kept state from a remade one by them.
    #[cfg(test)]
    pub(super) fn addresses(&self) -> Vec<Option<usize>> {
        let slots = self.0.lock().unwrap_or_else(|p| p.into_inner());
        slots
            .iter()
            .map(|s| match s {
                Some(Slot::Made { prepared, .. }) => {
                    Some(std::sync::Arc::as_ptr(prepared) as *const u8 as usize)
                }
                _ => None,
            })
            .collect()
    }
}
