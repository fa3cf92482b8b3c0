//! W4A16: bf16 activations times NVFP4 weights in the K-major layout
//! (`bq` `[K/2, ldb]` two e2m1 codes per byte, low nibble = even k; `bs`
//! `[K/16, ldb]` e4m3 block scales; f32 `scale2`).
//!
//! Every variant runs the same loop: `w(n, k) = e2m1(code) · e4m3(scale)` in
//! f32 (exact: at most 2 × 4 significant bits), `acc` summed from +0 strictly
//! in k order with separate multiply and add, `c = bf16(scale2 · acc)`. One
//! loop for all of them makes `w4a16_gemm_n128_m128_bf16` equal `w4a16_gemm`
//! bit for bit, as its contract requires; the tiling names only describe the
//! GPU kernels. The row stride is `n` except in the `_ldb` variant.
use crate::ctx::Ctx;
use crate::gemm::{elems, mnk, product, NT};
use switchyard_core::codec::bf16_bits;
use switchyard_core::codec::fp8::e4m3_to_f32;
use switchyard_core::codec::nvfp4::{e2m1_to_f32, BLOCK};
use switchyard_core::{Error, Result};
use switchyard_kernels::gemm::w4a16::{
    DECODE_MAX_M, W4A16_GEMM, W4A16_GEMM_DECODE, W4A16_GEMM_N128, W4A16_GEMM_N128_LDB, W4A16_GEMM_N128_M128, W4A16_GEMM_N128_M128_BF16,
};

register!(W4A16_GEMM => w4a16_packed);
register!(W4A16_GEMM_N128 => w4a16_packed);
register!(W4A16_GEMM_N128_M128 => w4a16_packed);
register!(W4A16_GEMM_N128_M128_BF16 => w4a16_packed);
register!(W4A16_GEMM_N128_LDB => w4a16_ldb);
register!(W4A16_GEMM_DECODE => w4a16_decode);

/// The variants whose weight row stride is `n`.
fn w4a16_packed(c: &mut Ctx<'_>) -> Result<()> {
    let n = c.u32_size("n")?;
    w4a16(c, n)
}

fn w4a16_ldb(c: &mut Ctx<'_>) -> Result<()> {
    let (n, ldb) = (c.u32_size("n")?, c.u32_size("ldb")?);
    if ldb < n {
        return Err(Error::invalid(c.kernel(), "ldb", format!("ldb = {ldb} < n = {n}: weight rows would overlap")));
    }
    w4a16(c, ldb)
}

/// The decode variant holds every row's accumulator live in one block, so it
/// takes at most [`DECODE_MAX_M`] rows; the reference refuses more, as the
/// GPU kernel cannot compute them.
fn w4a16_decode(c: &mut Ctx<'_>) -> Result<()> {
    let m = c.u32_size("m")?;
    if m > DECODE_MAX_M {
        return Err(Error::invalid(c.kernel(), "m", format!("m = {m} > {DECODE_MAX_M}: too large for the decode-only variant")));
    }
    w4a16_packed(c)
}

/// The shared body, with weight row stride `ldb` bytes.
fn w4a16(c: &mut Ctx<'_>, ldb: usize) -> Result<()> {
    let kernel = c.kernel();
    let (m, n, k) = mnk(c)?;
    if k % BLOCK != 0 {
        return Err(Error::invalid(kernel, "k", format!("k = {k} is not a multiple of the NVFP4 scale block ({BLOCK})")));
    }
    let scale2 = c.f32("scale2")?;
    let (a, bq, bs, out) = (c.buf("a")?, c.buf("bq")?, c.buf("bs")?, c.buf("c")?);
    let a = c.bf16(a, 0, elems(kernel, "a", m, k)?)?;
    let bq = c.bytes(bq, 0, elems(kernel, "bq", k / 2, ldb)?, 1)?;
    let bs = c.bytes(bs, 0, elems(kernel, "bs", k / BLOCK, ldb)?, 1)?;
    let mn = elems(kernel, "c", m, n)?;
    c.bytes(out, 0, mn, 2)?;
    // Decode tables: 16 e2m1 codes and 256 e4m3 codes, so the panel fill is two lookups and a multiply.
    let e2m1: [f32; 16] = std::array::from_fn(|i| e2m1_to_f32(i as u8));
    let e4m3: [f32; 256] = std::array::from_fn(|i| e4m3_to_f32(i as u8));
    let acc = product(&a, m, n, k, std::slice::from_ref(&(0..k)), |n0, nt, panel| {
        for kk in 0..k {
            let codes = &bq[(kk / 2) * ldb + n0..(kk / 2) * ldb + n0 + nt];
            let scales = &bs[(kk / BLOCK) * ldb + n0..(kk / BLOCK) * ldb + n0 + nt];
            let shift = 4 * (kk % 2);
            for (j, (&q, &s)) in codes.iter().zip(scales).enumerate() {
                panel[kk * NT + j] = e2m1[((q >> shift) & 0xf) as usize] * e4m3[s as usize];
            }
        }
    });
    let bits: Vec<u16> = acc.iter().map(|&x| bf16_bits(scale2 * x)).collect();
    c.put_bf16(out, 0, &bits)
}
