//! WGSL composition (prelude + kernel) and naga validation with errors that
//! name the file and line of the kernel source, not of the composed text.
use switchyard_kernels::sources::{self, Source, WGSL_PRELUDE};

/// The internal byte-granular copy / zero used for unaligned edges (validated
/// with the catalogue's sources in the naga tests).
pub const BYTECOPY: Source = Source { path: "backend-wgpu/src/bytecopy.wgsl", text: include_str!("bytecopy.wgsl") };

/// Program name of [`BYTECOPY`] in the pipeline cache.
pub(crate) const BYTECOPY_NAME: &str = "__bytecopy";

/// The source of a program: a catalogue kernel's WGSL or an internal one.
pub(crate) fn source(name: &str) -> Option<Source> {
    if name == BYTECOPY_NAME {
        Some(BYTECOPY)
    } else {
        sources::wgsl(name)
    }
}

/// Prelude and kernel joined; kernel line `n` is composed line `n + prelude_lines()`.
pub fn compose(src: &Source) -> String {
    format!("{}\n{}", WGSL_PRELUDE.text.trim_end(), src.text)
}

fn prelude_lines() -> u32 {
    WGSL_PRELUDE.text.trim_end().lines().count() as u32
}

/// `path:line:col` of a composed-source location, pointing into the prelude
/// or the kernel file, plus the offending line's text.
fn locate(src: &Source, composed: &str, loc: Option<naga::SourceLocation>) -> String {
    let Some(loc) = loc else { return src.path.to_string() };
    let text = composed.lines().nth(loc.line_number.saturating_sub(1) as usize).unwrap_or("").trim();
    let pl = prelude_lines();
    let (path, line) = if loc.line_number <= pl { (WGSL_PRELUDE.path, loc.line_number) } else { (src.path, loc.line_number - pl) };
    format!("{path}:{line}:{}: `{text}`", loc.line_position)
}

/// Parses and validates `src` (prelude prepended) with naga. The error names
/// the file and line and carries naga's message.
pub fn validate(src: &Source) -> Result<naga::Module, String> {
    let composed = compose(src);
    let module = naga::front::wgsl::parse_str(&composed)
        .map_err(|e| format!("{}: {}", locate(src, &composed, e.location(&composed)), e.message()))?;
    naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::default()).validate(&module).map_err(
        |e| {
            let mut msg = e.as_inner().to_string();
            let mut cur: &dyn std::error::Error = e.as_inner();
            while let Some(next) = cur.source() {
                msg.push_str(": ");
                msg.push_str(&next.to_string());
                cur = next;
            }
            format!("{}: {msg}", locate(src, &composed, e.location(&composed)))
        },
    )?;
    Ok(module)
}
