//! What heads do when the model runs: induction / previous-token / duplicate-token scores and
//! prefix-copy accuracy on repeated sequences (docs/methods.md#5-probes-running-the-model), and
//! verdict tables for prompt suites (docs/methods.md#6-verdict-tables).

pub mod exercise;
pub mod induction;
pub mod question;
pub mod suite;

pub use induction::{FirstCopy, InductionReport, RepeatSource, induction_probe, random_first_copy};
pub use suite::{Suite, Verdict, VerdictRow, verdict_table};

use nalgebra::DMatrix;

use crate::backend::Backend;
use crate::forward::{HeadOutputs, Keep, Logits};
use crate::model::Weights;
use crate::{Error, Result};

/// Every head's attention pattern on `tokens` (`patterns[layer][head]`, query x key), the
/// forward pass on `backend`. A GPU that fails gives `Error::Gpu` (callers run it in
/// [`Backend::with_fallback`]).
pub async fn attention_patterns(
    model: &(impl Weights + ?Sized),
    tokens: &[usize],
    backend: &mut Backend,
) -> Result<Vec<Vec<DMatrix<f32>>>> {
    let keep = Keep { logits: Logits::None, ..HeadOutputs::None.into() };
    let outputs = backend.forward(model, &[(tokens, keep)], &mut |_, _| {}).await?;
    let output = outputs.into_iter().next().ok_or_else(|| Error::Internal("the forward pass gave no output".into()))?;
    Ok(output.patterns)
}
