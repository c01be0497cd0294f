//! Step 13 (beyond the DLI lab): model and pipeline parallelism. Its checks are
//! written on their own branch; until they are merged the step has none.
use super::Check;

pub const CHECKS: &[Check] = &[];
