//! WGSL composition (prelude + kernel + included fragments) and naga
//! validation with errors that name the file and line of the source the
//! offending line came from, not of the composed text.
use switchyard_kernels::sources::{self, Expanded, Source};

/// The internal byte-granular copy / zero used for unaligned edges (validated
/// with the catalogue's sources in the naga tests).
pub const BYTECOPY: Source = Source { path: "backend-wgpu/src/bytecopy.wgsl", text: include_str!("bytecopy.wgsl") };

/// Prelude and kernel joined, with the kernel's `//! include` lines expanded
/// (see [`sources::wgsl_expand`]); an unknown include is an error naming the
/// file and line. The fallback lanes (no subgroup operations).
pub fn compose(src: &Source) -> Result<Expanded, String> {
    compose_variant(src, false)
}

/// [`compose`] with the subgroup lanes (`subgroups`: `Lanes`, `row_sum` and
/// `row_best` through subgroup operations) or the fallback ones
/// ([`sources::wgsl_expand_variant`]).
pub fn compose_variant(src: &Source, subgroups: bool) -> Result<Expanded, String> {
    sources::wgsl_expand_variant(src, subgroups)
}

/// [`compose_variant`], and with `coopmat` the cooperative-matrix code of
/// kernels that have it ([`sources::wgsl_expand_coopmat`]).
pub fn compose_coopmat(src: &Source, subgroups: bool, coopmat: bool) -> Result<Expanded, String> {
    sources::wgsl_expand_coopmat(src, subgroups, coopmat)
}

/// `path:line:col` of a composed-source location, pointing into the prelude,
/// the kernel file or the fragment the line came from, plus the offending
/// line's text.
fn locate(src: &Source, composed: &Expanded, loc: Option<naga::SourceLocation>) -> String {
    let Some(loc) = loc else { return src.path.to_string() };
    let text = composed.text.lines().nth(loc.line_number.saturating_sub(1) as usize).unwrap_or("").trim();
    let (path, line) = composed.origin(loc.line_number).unwrap_or((src.path, loc.line_number));
    format!("{path}:{line}:{}: `{text}`", loc.line_position)
}

/// Parses and validates `src` (prelude prepended, includes expanded) with
/// naga. The error names the file and line and carries naga's message.
pub fn validate(src: &Source) -> Result<naga::Module, String> {
    validate_variant(src, false)
}

/// [`validate`] of the subgroup variant (`subgroups`, validated with
/// `Capabilities::SUBGROUP`) or the fallback one.
pub fn validate_variant(src: &Source, subgroups: bool) -> Result<naga::Module, String> {
    validate_composed(src, &compose_variant(src, subgroups)?, subgroups)
}

/// [`validate_variant`] of the cooperative-matrix variant (`coopmat`,
/// validated with `Capabilities::SHADER_FLOAT16 | COOPERATIVE_MATRIX`).
pub fn validate_coopmat(src: &Source, subgroups: bool, coopmat: bool) -> Result<naga::Module, String> {
    validate_composed_coopmat(src, &compose_coopmat(src, subgroups, coopmat)?, subgroups, coopmat)
}

/// [`validate`] of text already [`compose_variant`]d from `src`; `subgroups`
/// allows subgroup operations.
pub fn validate_composed(src: &Source, composed: &Expanded, subgroups: bool) -> Result<naga::Module, String> {
    validate_composed_coopmat(src, composed, subgroups, false)
}

/// [`validate_coopmat`] of text already [`compose_coopmat`]d from `src`.
pub fn validate_composed_coopmat(src: &Source, composed: &Expanded, subgroups: bool, coopmat: bool) -> Result<naga::Module, String> {
    let module = naga::front::wgsl::parse_str(&composed.text)
        .map_err(|e| format!("{}: {}", locate(src, composed, e.location(&composed.text)), e.message()))?;
    let mut caps = naga::valid::Capabilities::default();
    if subgroups {
        caps |= naga::valid::Capabilities::SUBGROUP;
    }
    if coopmat {
        caps |= naga::valid::Capabilities::SHADER_FLOAT16 | naga::valid::Capabilities::COOPERATIVE_MATRIX;
    }
    naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps).validate(&module).map_err(|e| {
        let mut msg = e.as_inner().to_string();
        let mut cur: &dyn std::error::Error = e.as_inner();
        while let Some(next) = cur.source() {
            msg.push_str(": ");
            msg.push_str(&next.to_string());
            cur = next;
        }
        format!("{}: {msg}", locate(src, composed, e.location(&composed.text)))
    })?;
    Ok(module)
}
