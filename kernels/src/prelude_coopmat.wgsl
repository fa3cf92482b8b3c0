enable f16;
enable wgpu_cooperative_matrix;
// The cooperative-matrix variant of a kernel (sources::wgsl_expand_coopmat):
// these enables must precede every declaration, so they lead the composed
// text, before prelude.wgsl; the kernel's `//! coopmat "<fragment>"` lines
// then expand like includes. Other variants drop those lines.
