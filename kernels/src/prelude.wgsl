// Switchyard WGSL prelude, prepended to every kernel.
//
// Binding convention (the wgpu backend builds the layout from the kernel's
// signature): @binding(0) is a uniform `Params` struct holding one 32-bit word
// per declared argument, in order (pointers as u32 word offsets into their
// binding, NONE for null; scalars as their bits), then `gx, gy, gz` (the
// logical grid), `fold` (how x was folded past the per-dimension limit) and
// four kernel-specific extras x0..x3. @binding(1 + k) is the k-th pointer
// argument, bound whole (or from an aligned window) as read_write storage so
// that aliased arguments (v_raw == k_raw, resid_out == resid) bind legally.
// Scratch bindings, where a kernel has one, come after the pointer arguments.
//
// WGSL has no bf16 or fp8: bf16 moves as packed pairs in u32 words (element
// 2w in the low half), fp8 as four codes per word (lowest byte first).

const NONE: u32 = 0xffffffffu;
const BF16_NAN: u32 = 0x7fc0u;
const BF16_NAN2: u32 = 0x7fc07fc0u;
const F32_NAN: u32 = 0x7fc00000u;

// Logical workgroup x: the host folds x into y (fold = 1, 1-D grids) or z
// (fold = 2, 2-D grids) when it exceeds max_compute_workgroups_per_dimension.
fn group_x(wid: vec3<u32>, nwg: vec3<u32>, fold: u32) -> u32 {
    if (fold == 1u) {
        return wid.x + wid.y * nwg.x;
    }
    if (fold == 2u) {
        return wid.x + wid.z * nwg.x;
    }
    return wid.x;
}

fn group_y(wid: vec3<u32>, fold: u32) -> u32 {
    return select(wid.y, 0u, fold == 1u);
}

fn bf16_lo(w: u32) -> f32 {
    return bitcast<f32>(w << 16u);
}

fn bf16_hi(w: u32) -> f32 {
    return bitcast<f32>(w & 0xffff0000u);
}

// f32 -> bf16 bits, round to nearest even; NaN keeps sign and top payload
// and gets the quiet bit, exactly as the `half` crate does.
fn bf16_bits(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return (b >> 16u) | 0x40u;
    }
    let up = (b & 0x8000u) != 0u && (b & 0x17fffu) != 0u;
    return (b >> 16u) + select(0u, 1u, up);
}

fn bf16_round(x: f32) -> f32 {
    return bitcast<f32>(bf16_bits(x) << 16u);
}

fn pack_bf16(lo: f32, hi: f32) -> u32 {
    return (bf16_bits(lo) & 0xffffu) | (bf16_bits(hi) << 16u);
}

fn is_nan_f32(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

// One e4m3fn code (low 8 bits of c): no infinities, 0x7f / 0xff are NaN.
// Normals are rebuilt by moving exponent and mantissa into f32 position and
// rebiasing (7 -> 127); subnormals are m * 2^-9, computed in float so that a
// device flushing f32 denormals cannot lose them.
fn e4m3(c: u32) -> f32 {
    let mag = c & 0x7fu;
    let normal = bitcast<f32>((mag << 20u) + (120u << 23u));
    var v = select(normal, f32(mag) * 0.001953125, mag < 8u);
    v = select(v, bitcast<f32>(F32_NAN), mag == 0x7fu);
    return bitcast<f32>(bitcast<u32>(v) | ((c & 0x80u) << 24u));
}

// c * tanh(x / c); c = 0 means no cap.
fn softcap(x: f32, c: f32) -> f32 {
    if (c == 0.0) {
        return x;
    }
    return c * tanh(x / c);
}

// (Σ x² / n + eps)^-0.5 with the reference's two roundings (divide, then sqrt
// and reciprocal).
fn inv_rms(ss: f32, n: u32, eps: f32) -> f32 {
    return 1.0 / sqrt(ss / f32(n) + eps);
}

// Workgroup-wide sum for 256-thread workgroups. Every invocation must call it
// (it holds barriers); the result is the same in every invocation.
var<workgroup> wg_red: array<f32, 256>;

fn wg_sum256(v: f32, lid: u32) -> f32 {
    wg_red[lid] = v;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            wg_red[lid] = wg_red[lid] + wg_red[lid + s];
        }
        workgroupBarrier();
    }
    let r = wg_red[0];
    workgroupBarrier();
    return r;
}

// Words per thread a 256-thread row kernel keeps in registers between its
// passes (rows up to 256 * CACHE words = 8192 bf16); longer rows re-read.
const CACHE: u32 = 16u;

// --- 16-byte (vec4<u32>) helpers ------------------------------------------
// Memory-bound kernels view their big streams as array<vec4<u32>>: one load
// moves 16 bytes (8 bf16 / 16 fp8), four times the bytes in flight of a
// word load. Word w of such a view is v[w >> 2][w & 3]. A vec4 holds words
// 4q..4q+3, so its `lo` halves are elements 8q, 8q+2, 8q+4, 8q+6 and its `hi`
// halves 8q+1, 8q+3, ...; element-wise ops between two such vectors pair the
// same elements.

fn bf16x4_lo(v: vec4<u32>) -> vec4<f32> {
    return bitcast<vec4<f32>>(v << vec4<u32>(16u));
}

fn bf16x4_hi(v: vec4<u32>) -> vec4<f32> {
    return bitcast<vec4<f32>>(v & vec4<u32>(0xffff0000u));
}

// bf16_bits, lane-wise (same rounding and NaN rule).
fn bf16_bits4(x: vec4<f32>) -> vec4<u32> {
    let b = bitcast<vec4<u32>>(x);
    let nan = (b & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u);
    let up = ((b & vec4<u32>(0x8000u)) != vec4<u32>(0u)) & ((b & vec4<u32>(0x17fffu)) != vec4<u32>(0u));
    let r = (b >> vec4<u32>(16u)) + select(vec4<u32>(0u), vec4<u32>(1u), up);
    return select(r, (b >> vec4<u32>(16u)) | vec4<u32>(0x40u), nan);
}

fn bf16_round4(x: vec4<f32>) -> vec4<f32> {
    return bitcast<vec4<f32>>(bf16_bits4(x) << vec4<u32>(16u));
}

fn pack_bf16x4(lo: vec4<f32>, hi: vec4<f32>) -> vec4<u32> {
    return (bf16_bits4(lo) & vec4<u32>(0xffffu)) | (bf16_bits4(hi) << vec4<u32>(16u));
}

// Σ x² over the eight bf16 of a vector.
fn sq_bf16x4(v: vec4<u32>) -> f32 {
    let a = bf16x4_lo(v);
    let b = bf16x4_hi(v);
    return dot(a, a) + dot(b, b);
}

// The four e4m3 codes of a word, lowest byte first.
fn e4m3x4(w: u32) -> vec4<f32> {
    return vec4<f32>(e4m3(w & 0xffu), e4m3((w >> 8u) & 0xffu), e4m3((w >> 16u) & 0xffu), e4m3(w >> 24u));
}

// True when every word offset is a multiple of 4, i.e. the vec4 view of
// each binding starts at the argument (NONE, a null pointer, counts as aligned).
fn aligned4(a: u32, b: u32, c: u32, d: u32) -> bool {
    let x = select(a, 0u, a == NONE) | select(b, 0u, b == NONE) | select(c, 0u, c == NONE) | select(d, 0u, d == NONE);
    return (x & 3u) == 0u;
}

// Whether candidate (bi, bv) beats (ai, av) in an argmax: a larger value,
// then the lower index; index -1 (nothing eligible) loses to everything.
fn beats_best(bi: i32, bv: f32, ai: i32, av: f32) -> bool {
    if (bi < 0) {
        return false;
    }
    if (ai < 0) {
        return true;
    }
    return bv > av || (bv == av && bi < ai);
}
