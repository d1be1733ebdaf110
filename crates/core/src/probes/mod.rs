//! What heads do when the model runs (spec section 4): induction / previous-token /
//! duplicate-token scores and prefix-copy accuracy on repeated sequences, and verdict tables
//! for prompt suites.

pub mod exercise;
pub mod induction;
pub mod question;
pub mod suite;

pub use induction::{FirstCopy, InductionReport, RepeatSource, induction_probe, random_first_copy};
pub use suite::{Suite, Verdict, VerdictRow, verdict_table};
