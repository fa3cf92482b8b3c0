//! The test harness of Switchyard's backend-dependent test binaries: a test
//! that needs a backend this machine does not have is reported as
//! **ignored, with the reason**, never as a pass.
//!
//! # Why a harness and not `#[ignore]`
//!
//! Whether a backend is present is known only when the tests run: a laptop
//! has a Vulkan adapter or not, the CI machine has lavapipe, the H200 machine
//! has CUDA. Rust's built-in harness can mark a test ignored only at compile
//! time (`#[ignore]`), so a test that finds no device at run time could only
//! return early and be counted as passed. Marking the GPU tests `#[ignore]`
//! instead would need every run on a machine that has the device to remember
//! `--include-ignored`, and would hide the wgpu tests from the plain
//! `cargo test --workspace` of a developer with a GPU. So the binaries whose
//! tests need a device use this harness (built on `libtest-mimic`, with the
//! built-in harness's command line and output): each test declares the
//! backend it needs, the harness probes each backend once, and a test whose
//! backend is missing ends as `ignored (backend wgpu unavailable: …)`. The
//! summary line counts it under `ignored`.
//!
//! `SWITCHYARD_REQUIRE_<BACKEND>=1` (`SWITCHYARD_REQUIRE_WGPU`,
//! `SWITCHYARD_REQUIRE_CUDA`) turns a missing backend into a failure of every
//! test that needs it: CI and the GPU runs set them, so the backend they are
//! meant to test can never be skipped silently.
//!
//! # Using it
//!
//! The test target sets `harness = false` in its `Cargo.toml`; the file
//! registers its tests with [`tests!`] (plain functions, no `#[test]`) and ends
//! with [`main!`], naming the function that opens (probes) a backend:
//!
//! ```text
//! fn gemm_matches() { /* … */ }
//! fn naga_accepts_every_shader() { /* … */ }
//! switchyard_test_harness::tests!(needs "wgpu": gemm_matches);
//! switchyard_test_harness::tests!(naga_accepts_every_shader);
//! switchyard_test_harness::main!(|name| open(name).map(|_| ()).map_err(|e| e.to_string()));
//! ```
//!
//! A `#[test]` function in such a file would never run (without the built-in
//! harness it is compiled out), so `switchyard-tests`' `harness_files` test
//! fails on any `#[test]` left in a `harness = false` target.
use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

pub use inventory;
use libtest_mimic::{Arguments, Completion, Failed, Trial};

/// One registered test: its name inside the binary, the backend it needs
/// (`None`: nothing beyond the CPU) and its body.
pub struct Test {
    /// The name the summary prints and filters match (`gemm_matches`, `leaks::wgpu`).
    pub name: &'static str,
    /// Backend name (`"cpu"`, `"wgpu"`, `"cuda"`) whose absence skips the test.
    pub needs: Option<&'static str>,
    /// The test: it fails by panicking, as a `#[test]` function does.
    pub run: fn(),
}

inventory::collect!(Test);

/// Registers plain functions as tests: `tests!(a, b)` for tests that need no
/// device, `tests!(needs "wgpu": a, b)` for tests that need that backend.
#[macro_export]
macro_rules! tests {
    (needs $backend:literal : $($f:ident),+ $(,)?) => {
        $($crate::inventory::submit! {
            $crate::Test { name: stringify!($f), needs: Some($backend), run: $f }
        })+
    };
    ($($f:ident),+ $(,)?) => {
        $($crate::inventory::submit! {
            $crate::Test { name: stringify!($f), needs: None, run: $f }
        })+
    };
}

/// The test binary's `fn main`: runs every registered test. `$probe` is a
/// `fn(&str) -> Result<(), String>` that opens the named backend (and drops
/// it) or says why it cannot. `before: f` calls `f()` first, while the
/// process has no other thread (to set environment variables that the code
/// under test reads once).
#[macro_export]
macro_rules! main {
    ($probe:expr) => {
        fn main() {
            $crate::run($probe)
        }
    };
    ($probe:expr, before: $setup:expr) => {
        fn main() {
            ($setup)();
            $crate::run($probe)
        }
    };
}

/// The environment flag that makes backend `name` required
/// (`SWITCHYARD_REQUIRE_WGPU` for `wgpu`).
pub fn require_flag(name: &str) -> String {
    format!("SWITCHYARD_REQUIRE_{}", name.to_uppercase().replace('-', "_"))
}

/// Whether the environment flag `name` is set to something other than empty or `0`.
pub fn flag_set(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

type Probe = fn(&str) -> Result<(), String>;

/// A test that runs at least this long is named on stderr (`slow test: …`),
/// so a CI log shows where its time goes.
pub const SLOW_SECS: f64 = 30.0;

/// Each backend's probe result, worked out once per binary.
fn availability(probe: Probe, name: &'static str) -> Result<(), String> {
    static SEEN: OnceLock<Mutex<BTreeMap<&'static str, Result<(), String>>>> = OnceLock::new();
    let seen = SEEN.get_or_init(Default::default);
    // Held while probing, so concurrent tests wait for the one probe.
    let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
    seen.entry(name).or_insert_with(|| probe(name)).clone()
}

/// Runs every registered [`Test`] under libtest's command line (filters,
/// `--list`, `--exact`, `--test-threads`, `--ignored`, …) and exits with its
/// status. A test whose backend is missing ends ignored with the reason, or
/// failed when that backend's `SWITCHYARD_REQUIRE_*` flag is set.
pub fn run(probe: Probe) -> ! {
    let args = Arguments::from_args();
    let mut tests: Vec<&'static Test> = inventory::iter::<Test>.into_iter().collect();
    tests.sort_by_key(|t| t.name);
    if let Some(w) = tests.windows(2).find(|w| w[0].name == w[1].name) {
        panic!("test `{}` is registered twice", w[0].name);
    }
    assert!(!tests.is_empty(), "this test binary registers no tests (tests!/per_backend! missing?)");
    let trials = tests
        .into_iter()
        .map(|t| {
            Trial::ignorable_test(t.name, move || {
                if let Some(name) = t.needs {
                    if let Err(why) = availability(probe, name) {
                        let flag = require_flag(name);
                        if flag_set(&flag) {
                            return Err(Failed::from(format!("{flag} is set but this test needs {name}: {why}")));
                        }
                        return Ok(Completion::ignored_with(format!("needs {name}: {why}")));
                    }
                }
                let start = std::time::Instant::now();
                (t.run)();
                let secs = start.elapsed().as_secs_f64();
                if secs >= SLOW_SECS {
                    eprintln!("slow test: {} took {secs:.0} s", t.name);
                }
                Ok(Completion::Completed)
            })
        })
        .collect();
    libtest_mimic::run(&args, trials).exit()
}
