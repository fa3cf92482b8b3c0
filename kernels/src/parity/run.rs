use super::{Case, CaseSet, Gen, Init};
use crate::Ops;
use std::fmt::Write as _;
use switchyard_core::codec::bytes;
use switchyard_core::compare::{compare, Values};
use switchyard_core::{registry, DType, DeviceBuffer, KernelSig, Result};

/// Pattern bytes placed after every output.
pub const GUARD_BYTES: usize = 256;
const GUARD: u8 = 0x5a;

fn poison_byte(dtype: DType) -> u8 {
    match dtype {
        DType::I32 | DType::U32 => 0xa5,
        _ => 0xff,
    }
}

/// Why a parity row did or did not pass.
#[derive(Clone, Debug, PartialEq)]
pub enum Status {
    /// Within tolerance, guards intact, everything written.
    Pass,
    /// Values outside tolerance.
    Mismatch(String),
    /// Bytes after the output were overwritten.
    GuardCorrupted(String),
    /// Elements still hold the poison pattern.
    Unwritten(String),
    /// The launch (or setup) failed.
    Error(String),
    /// The kernel is declared but has no parity case.
    NoCase,
    /// Direct launch passed, but the same case replayed from a recording
    /// did not give the same bytes (or could not be recorded or replayed).
    ReplayDiffers(String),
}

impl Status {
    /// Whether this row passed.
    pub fn passed(&self) -> bool {
        *self == Status::Pass
    }
    fn word(&self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Mismatch(_) => "FAIL mismatch",
            Status::GuardCorrupted(_) => "FAIL guard",
            Status::Unwritten(_) => "FAIL unwritten",
            Status::Error(_) => "FAIL error",
            Status::NoCase => "FAIL no case",
            Status::ReplayDiffers(_) => "FAIL replay",
        }
    }
    fn detail(&self) -> &str {
        match self {
            Status::Mismatch(s) | Status::GuardCorrupted(s) | Status::Unwritten(s) | Status::Error(s) | Status::ReplayDiffers(s) => s,
            _ => "",
        }
    }
}

/// One compared output of one case on one backend.
#[derive(Clone, Debug)]
pub struct Row {
    /// Kernel symbol.
    pub kernel: &'static str,
    /// Case shape label.
    pub case: String,
    /// Candidate backend.
    pub backend: String,
    /// Output argument name (or `-` for a case-level error).
    pub output: String,
    /// Largest error in the tolerance's unit.
    pub max_err: f64,
    /// The tolerance.
    pub tol: String,
    /// Outcome.
    pub status: Status,
    /// Whether the case replayed from a recording gave bytes identical to
    /// the direct launch (outputs and guard bytes).
    pub replay_identical: bool,
}

/// `N passed, M failed (replayed: K identical)` for a backend's rows.
pub fn summary(backend: &str, rows: &[Row]) -> String {
    let fails = rows.iter().filter(|r| !r.status.passed()).count();
    let identical = rows.iter().filter(|r| r.replay_identical).count();
    format!("{backend}: {} passed, {fails} failed (replayed: {identical} identical)", rows.len() - fails)
}

struct RunOutput {
    /// Per buffer: (contents, guard bytes) for checked buffers.
    outputs: Vec<Option<(Vec<u8>, Vec<u8>)>>,
}

/// How a case's launches are issued.
#[derive(Clone, Copy, PartialEq)]
enum Launch {
    Direct,
    /// Recorded, then replayed once: what a decode step does every token.
    Replayed,
}

fn execute(ops: &Ops, case: &Case, how: Launch) -> Result<RunOutput> {
    let be = &ops.be;
    let mut bufs = Vec::with_capacity(case.buffers.len());
    let mut regions = Vec::with_capacity(case.buffers.len());
    for b in &case.buffers {
        let len = b.len();
        let guard = if b.check.is_some() { GUARD_BYTES } else { 0 };
        let buf = DeviceBuffer::new(be, (len + guard).max(1))?;
        let mut init = match &b.init {
            Init::Data(d) => d.clone(),
            Init::Poison(n) => vec![poison_byte(b.check.as_ref().map_or(DType::BF16, |c| c.dtype)); *n],
        };
        init.resize(len + guard, GUARD);
        buf.write(&init)?;
        // The launcher sees the data only: touching the guard is refused before the launch.
        regions.push(buf.slice(0, len)?);
        bufs.push(buf);
    }
    match how {
        Launch::Direct => (case.run)(ops, &regions)?,
        Launch::Replayed => {
            let recording = be.record(&mut || (case.run)(ops, &regions))?;
            be.replay(&recording)?;
        }
    }
    be.synchronize()?;
    let mut outputs = Vec::new();
    for (b, buf) in case.buffers.iter().zip(&bufs) {
        outputs.push(match b.check {
            Some(_) => {
                let mut all = buf.to_vec()?;
                all.truncate(b.len() + GUARD_BYTES);
                let guard = all.split_off(b.len());
                Some((all, guard))
            }
            None => None,
        });
    }
    Ok(RunOutput { outputs })
}

/// Why the replayed run is not byte-identical to the direct one, if it is not.
fn replay_difference(direct: &RunOutput, replayed: &Result<RunOutput>, i: usize) -> Option<String> {
    let replayed = match replayed {
        Ok(r) => r,
        Err(e) => return Some(format!("recording or replay failed: {e}")),
    };
    let (Some((d, dg)), Some((r, rg))) = (&direct.outputs[i], &replayed.outputs[i]) else { return None };
    if let Some(j) = d.iter().zip(r).position(|(a, b)| a != b) {
        return Some(format!("byte {j} differs: direct {:#04x}, replayed {:#04x}", d[j], r[j]));
    }
    dg.iter().zip(rg).position(|(a, b)| a != b).map(|j| format!("guard byte {j} differs between direct and replayed runs"))
}

fn decode(dtype: DType, b: &[u8]) -> Values {
    match dtype {
        DType::BF16 => Values::Bf16(bytes::bf16_bits_from_bytes(b)),
        DType::F32 => Values::F32(bytes::f32_from_bytes(b)),
        DType::I32 | DType::U32 => Values::I32(bytes::i32_from_bytes(b)),
        _ => Values::U8(b.to_vec()),
    }
}

/// Runs one case on both backends and compares every checked output.
fn check_case(reference: &Ops, candidate: &Ops, case: &Case) -> Vec<Row> {
    let row = |output: &str, max_err: f64, tol: String, status: Status| Row {
        kernel: case.kernel.symbol,
        case: case.label.clone(),
        backend: candidate.be.name().to_string(),
        output: output.to_string(),
        max_err,
        tol,
        status,
        replay_identical: false,
    };
    let expected = match execute(reference, case, Launch::Direct) {
        Ok(r) => r,
        Err(e) => return vec![row("-", f64::NAN, "-".into(), Status::Error(format!("reference {}: {e}", reference.be.name())))],
    };
    let actual = match execute(candidate, case, Launch::Direct) {
        Ok(r) => r,
        Err(e) => return vec![row("-", f64::NAN, "-".into(), Status::Error(e.to_string()))],
    };
    let replayed = execute(candidate, case, Launch::Replayed);
    let mut rows = Vec::new();
    for (i, b) in case.buffers.iter().enumerate() {
        let Some(check) = &b.check else { continue };
        let (exp, exp_guard) = expected.outputs[i].as_ref().expect("checked buffer was downloaded");
        let (act, act_guard) = actual.outputs[i].as_ref().expect("checked buffer was downloaded");
        let tol = check.tol.to_string();
        if let Some(g) = exp_guard.iter().position(|&x| x != GUARD) {
            rows.push(row(b.name, f64::NAN, tol, Status::GuardCorrupted(format!("reference wrote guard byte {g} past the end"))));
            continue;
        }
        if let Some(g) = act_guard.iter().position(|&x| x != GUARD) {
            let n = act_guard.iter().filter(|&&x| x != GUARD).count();
            rows.push(row(
                b.name,
                f64::NAN,
                tol,
                Status::GuardCorrupted(format!("{n} guard bytes overwritten, first at {} bytes past the end", g)),
            ));
            continue;
        }
        let width = (check.dtype.bits() / 8).max(1);
        let poison = poison_byte(check.dtype);
        let is_poison = |c: &[u8]| c.iter().all(|&x| x == poison);
        let unwritten: Vec<usize> = act
            .chunks(width)
            .zip(exp.chunks(width))
            .enumerate()
            .filter(|(_, (a, e))| is_poison(a) && !is_poison(e))
            .map(|(j, _)| j)
            .collect();
        if !unwritten.is_empty() {
            rows.push(row(
                b.name,
                f64::NAN,
                tol,
                Status::Unwritten(format!(
                    "{} of {} elements never written, first at index {}",
                    unwritten.len(),
                    exp.len() / width,
                    unwritten[0]
                )),
            ));
            continue;
        }
        let rep = compare(&decode(check.dtype, act), &decode(check.dtype, exp), &check.tol);
        let differs = replay_difference(&actual, &replayed, i);
        let status = match (&differs, rep.passed()) {
            (_, false) => Status::Mismatch(rep.to_string()),
            (Some(d), true) => Status::ReplayDiffers(d.clone()),
            (None, true) => Status::Pass,
        };
        rows.push(Row { replay_identical: differs.is_none(), ..row(b.name, rep.max_err, tol, status) });
    }
    rows
}

/// Every case of one kernel, from `seed`.
pub fn check_kernel(reference: &Ops, candidate: &Ops, sig: &'static KernelSig, seed: u64) -> Vec<Row> {
    let sets: Vec<&CaseSet> = inventory::iter::<CaseSet>.into_iter().filter(|s| std::ptr::eq(s.kernel, sig)).collect();
    if sets.is_empty() {
        return vec![Row {
            kernel: sig.symbol,
            case: "-".into(),
            backend: candidate.be.name().into(),
            output: "-".into(),
            max_err: f64::NAN,
            tol: "-".into(),
            status: Status::NoCase,
            replay_identical: false,
        }];
    }
    let mut gen = Gen::new(seed ^ fxhash(sig.symbol));
    sets.iter().flat_map(|s| (s.cases)(&mut gen)).flat_map(|c| check_case(reference, candidate, &c)).collect()
}

/// Cases the caller built (shapes that depend on the device, say), each run
/// and checked as a registered case is.
pub fn check_cases(reference: &Ops, candidate: &Ops, cases: &[Case]) -> Vec<Row> {
    cases.iter().flat_map(|c| check_case(reference, candidate, c)).collect()
}

/// Every declared kernel that the candidate implements (and whose name
/// contains `filter`, if given).
pub fn run_all(reference: &Ops, candidate: &Ops, seed: u64, filter: Option<&str>) -> Vec<Row> {
    registry::kernels()
        .into_iter()
        .filter(|k| registry::implements(candidate.be.kind(), k))
        .filter(|k| filter.is_none_or(|f| k.symbol.contains(f)))
        .flat_map(|k| check_kernel(reference, candidate, k, seed))
        .collect()
}

fn fxhash(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}

/// A markdown table of the rows, failures with their detail underneath.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::from("| kernel | case | backend | output | max error | tolerance | result |\n|---|---|---|---|---|---|---|\n");
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.3e} | {} | {} |",
            r.kernel,
            r.case,
            r.backend,
            r.output,
            r.max_err,
            r.tol,
            r.status.word()
        );
    }
    for r in rows.iter().filter(|r| !r.status.passed()) {
        let _ = writeln!(s, "\n- {} [{}] {} on {}: {} {}", r.kernel, r.case, r.output, r.backend, r.status.word(), r.status.detail());
    }
    s
}
