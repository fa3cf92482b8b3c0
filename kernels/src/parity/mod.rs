//! The parity harness: every declared kernel's cases, run on a reference and
//! a candidate backend, outputs compared under the parity tolerances (ARCHITECTURE.md).
//!
//! Before each run, outputs are poisoned (NaN bytes for floats, 0xA5 for
//! integers) so an element nobody wrote shows up, and [`GUARD_BYTES`] of a
//! known pattern follow every output so a write past its end shows up.
mod case;
mod gen;
mod run;

pub use case::{Buffer, Case, CaseSet, Check, Init};
pub use gen::{mirror_halves, Gen};
pub use run::{check_cases, check_kernel, run_all, summary, table, Row, Status, GUARD_BYTES};
