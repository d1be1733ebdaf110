//! What heads do when the model runs: induction / previous-token / duplicate-token scores and
//! prefix-copy accuracy on repeated sequences (docs/methods.md#5-probes-running-the-model), and
//! verdict tables for prompt suites (docs/methods.md#6-verdict-tables).

pub mod exercise;
pub mod induction;
pub mod question;
pub mod suite;

pub use induction::{FirstCopy, InductionReport, RepeatSource, induction_probe, random_first_copy};
pub use suite::{Suite, Verdict, VerdictRow, verdict_table};
