// c = bf16(c + scale · bf16(acc)) in one pass. acc comes from the same tile
// core as dense_gemm_tc (dense_gemm.wgsl), and the epilogue is
// scaled_add_bf16's, so the result equals dense_gemm_tc into scratch then
// scaled_add_bf16 bit for bit. Grid (⌈N/128⌉, ⌈M/128⌉) from the host plan,
// or ⌈N/32⌉ workgroups of the small path for M ≤ 16 (as dense_gemm_tc).
struct Params {
    a: u32, b: u32, c: u32, m: u32, n: u32, k: u32, scale: f32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_a: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_b: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_c: array<u32>;

// `scale · t` is not exact in f32, so a driver fusing it into the following
// add (allowed without SPIR-V NoContraction, which naga does not emit) would
// round once instead of twice. OR-ing in x3, a runtime word the host always
// sets to 0, hides the product's value from the optimizer and forces it to
// be rounded to f32 first.
fn rounded(x: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(x) | p.x3);
}

fn scaled_add(c: f32, t: f32) -> f32 {
    let u = rounded(p.scale * t);
    return c + u;
}

// ---- begin dense tile core ----
// Shared verbatim by dense_gemm.wgsl, dense_gemm_tc_scaled_acc.wgsl and
// dense_gemm_splitk_partial.wgsl (WGSL has no include; a test in
// backend-wgpu/tests/gemm.rs checks the copies are identical).
//
// A 256-thread workgroup computes a TILE × TILE output tile; thread (tx, ty)
// owns 8 rows {4ty..4ty+3, 64+4ty..64+4ty+3} × 8 columns {4tx.., 64+4tx..},
// so each shared-memory read is one vec4 and four of them feed 64
// multiply-adds. A and B stage through shared memory BK values of k at a
// time, decoded to f32 once, k-major so a row quad or column quad is one
// vec4. Every output sums from +0 in strictly increasing k (register
// blocking is over independent outputs, never over k): the result equals the
// scalar reference bit for bit. A bf16 × bf16 product is exact in f32, so a
// driver contracting `acc + a * b` into an FMA changes nothing. Padding (rows
// past M or N, k outside [klo, khi)) is staged as +0 in both operands: the
// products are +0 and `acc + 0` leaves an accumulator that started at +0
// unchanged.
const TILE: u32 = 128u;
const BK: u32 = 16u;
// vec4 slots per staged k: TILE / 4.
const Q: u32 = 32u;

var<workgroup> sa: array<vec4<f32>, 512>;
var<workgroup> sb: array<vec4<f32>, 512>;
var<private> acc: array<vec4<f32>, 16>;

// Tile row of the thread's i-th output row (i in 0..8).
fn tile_row(i: u32, ty: u32) -> u32 {
    return select(64u + 4u * ty + i - 4u, 4u * ty + i, i < 4u);
}

// Loads rows 4q..4q+3 (of rows0..rows0+TILE, below `rows`) of the bf16
// matrix at word offset base with kw words per row, word w of the stage, and
// returns the (even k, odd k) vec4 pair, masked to [klo, khi).
fn stage_a(base: u32, row0: u32, rows: u32, kw: u32, w: u32, q: u32, ok: vec2<bool>) -> array<vec4<f32>, 2> {
    var lo = vec4<f32>(0.0);
    var hi = vec4<f32>(0.0);
    for (var r = 0u; r < 4u; r++) {
        let row = row0 + 4u * q + r;
        var v = 0u;
        if (row < rows && w < kw) {
            v = d_a[base + row * kw + w];
        }
        lo[r] = select(0.0, bf16_lo(v), ok.x);
        hi[r] = select(0.0, bf16_hi(v), ok.y);
    }
    return array<vec4<f32>, 2>(lo, hi);
}

fn stage_b(base: u32, row0: u32, rows: u32, kw: u32, w: u32, q: u32, ok: vec2<bool>) -> array<vec4<f32>, 2> {
    var lo = vec4<f32>(0.0);
    var hi = vec4<f32>(0.0);
    for (var r = 0u; r < 4u; r++) {
        let row = row0 + 4u * q + r;
        var v = 0u;
        if (row < rows && w < kw) {
            v = d_b[base + row * kw + w];
        }
        lo[r] = select(0.0, bf16_lo(v), ok.x);
        hi[r] = select(0.0, bf16_hi(v), ok.y);
    }
    return array<vec4<f32>, 2>(lo, hi);
}

// acc = Σ_{k ∈ [klo, khi)} a[m0 + row, k] · b[n0 + col, k] for the thread's
// 8 × 8 outputs (acc[2i + j]: row tile_row(i), columns 4tx + 64j + 0..3).
// klo, khi must be workgroup-uniform (the loop holds barriers).
fn tile_sums(m0: u32, n0: u32, klo: u32, khi: u32, lid: u32) {
    let kw = p.k / 2u;
    let tx = lid % 16u;
    let ty = lid / 16u;
    // Loader role: row quad q (0..32) of both tiles, word lw (0..8) of the stage.
    let q = lid / 8u;
    let lw = lid % 8u;
    for (var i = 0u; i < 16u; i++) {
        acc[i] = vec4<f32>(0.0);
    }
    for (var kt = klo & ~1u; kt < khi; kt += BK) {
        let k = kt + 2u * lw;
        let w = kt / 2u + lw;
        let ok = vec2<bool>((k >= klo) && (k < khi), (k + 1u >= klo) && (k + 1u < khi));
        let va = stage_a(p.a, m0, p.m, kw, w, q, ok);
        let vb = stage_b(p.b, n0, p.n, kw, w, q, ok);
        workgroupBarrier();
        sa[2u * lw * Q + q] = va[0];
        sa[(2u * lw + 1u) * Q + q] = va[1];
        sb[2u * lw * Q + q] = vb[0];
        sb[(2u * lw + 1u) * Q + q] = vb[1];
        workgroupBarrier();
        for (var t = 0u; t < BK; t++) {
            let a0 = sa[t * Q + ty];
            let a1 = sa[t * Q + 16u + ty];
            let b0 = sb[t * Q + tx];
            let b1 = sb[t * Q + 16u + tx];
            acc[0] = acc[0] + a0.x * b0;
            acc[1] = acc[1] + a0.x * b1;
            acc[2] = acc[2] + a0.y * b0;
            acc[3] = acc[3] + a0.y * b1;
            acc[4] = acc[4] + a0.z * b0;
            acc[5] = acc[5] + a0.z * b1;
            acc[6] = acc[6] + a0.w * b0;
            acc[7] = acc[7] + a0.w * b1;
            acc[8] = acc[8] + a1.x * b0;
            acc[9] = acc[9] + a1.x * b1;
            acc[10] = acc[10] + a1.y * b0;
            acc[11] = acc[11] + a1.y * b1;
            acc[12] = acc[12] + a1.z * b0;
            acc[13] = acc[13] + a1.z * b1;
            acc[14] = acc[14] + a1.w * b0;
            acc[15] = acc[15] + a1.w * b1;
        }
    }
}

// Small M (M ≤ 16, decode): the 128-row tile would waste most of its work, and
// only the weight stream matters. A 128-thread workgroup owns SN = 32 output
// columns and every row; each stage of SK = 64 k loads the 32 B rows as 32
// contiguous words each (a warp reads 128 bytes per instruction) and all M A
// rows, both decoded to f32 in shared memory. Thread (rg, cg) sums column cg
// of rows rg, rg + 4, rg + 8, rg + 12 from +0 in strictly increasing k: the
// same result as the tiled path. M is a pipeline override so those loops
// unroll and the four accumulators stay in registers.
override M: u32 = 1u;
const SN: u32 = 32u;
const SK: u32 = 64u;
// sbs row stride (floats): 33, so the k-rows of one column fall in different banks.
const SBS: u32 = 33u;
var<workgroup> sbs: array<f32, 2112>;
var<workgroup> sas: array<f32, 1024>;
var<private> sacc: array<f32, 4>;

// sacc[i] = Σ_{k ∈ [klo, khi)} a[rg + 4i, k] · b[n0 + cg, k] for rg = lid / 32,
// cg = lid % 32. klo, khi must be workgroup-uniform.
fn small_sums(n0: u32, klo: u32, khi: u32, lid: u32) {
    let kw = p.k / 2u;
    let cg = lid % 32u;
    let rg = lid / 32u;
    for (var i = 0u; i < 4u; i++) {
        sacc[i] = 0.0;
    }
    for (var kt = klo & ~1u; kt < khi; kt += SK) {
        // B: rows rg + 4j (j < 8) of the 32, word cg of the stage's 32.
        let w = kt / 2u + cg;
        let k = 2u * w;
        let ok = vec2<bool>((k >= klo) && (k < khi), (k + 1u >= klo) && (k + 1u < khi));
        var bw: array<u32, 8>;
        for (var j = 0u; j < 8u; j++) {
            let row = n0 + rg + 4u * j;
            bw[j] = 0u;
            if (row < p.n && w < kw) {
                bw[j] = d_b[p.b + row * kw + w];
            }
        }
        // A: rows rg + 4j (j < M / 4 rounded up), same word.
        var aw: array<u32, 4>;
        for (var j = 0u; j < 4u; j++) {
            let row = rg + 4u * j;
            aw[j] = 0u;
            if (row < M && w < kw) {
                aw[j] = d_a[p.a + row * kw + w];
            }
        }
        workgroupBarrier();
        for (var j = 0u; j < 8u; j++) {
            let c = rg + 4u * j;
            sbs[2u * cg * SBS + c] = select(0.0, bf16_lo(bw[j]), ok.x);
            sbs[(2u * cg + 1u) * SBS + c] = select(0.0, bf16_hi(bw[j]), ok.y);
        }
        for (var j = 0u; j < 4u; j++) {
            let row = rg + 4u * j;
            if (row < M) {
                sas[row * SK + 2u * cg] = select(0.0, bf16_lo(aw[j]), ok.x);
                sas[row * SK + 2u * cg + 1u] = select(0.0, bf16_hi(aw[j]), ok.y);
            }
        }
        workgroupBarrier();
        for (var t = 0u; t < SK; t++) {
            let b = sbs[t * SBS + cg];
            for (var i = 0u; i < 4u; i++) {
                if (rg + 4u * i < M) {
                    sacc[i] = sacc[i] + sas[(rg + 4u * i) * SK + t] * b;
                }
            }
        }
    }
}

// Moves the small path's sums into sas ([row][SK], column cg at row · SK + cg),
// so that the epilogue can store column pairs as whole words.
fn small_publish(lid: u32) {
    let cg = lid % 32u;
    let rg = lid / 32u;
    workgroupBarrier();
    for (var i = 0u; i < 4u; i++) {
        if (rg + 4u * i < M) {
            sas[(rg + 4u * i) * SK + cg] = sacc[i];
        }
    }
    workgroupBarrier();
}
// ---- end dense tile core ----

@compute @workgroup_size(256)
fn dense_gemm_tc_scaled_acc(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                            @builtin(local_invocation_index) lid: u32) {
    let gx = group_x(wid, nwg, p.fold);
    if (gx >= p.gx) {
        return;
    }
    let m0 = group_y(wid, p.fold) * TILE;
    let n0 = gx * TILE;
    tile_sums(m0, n0, 0u, p.k, lid);
    let tx = lid % 16u;
    let ty = lid / 16u;
    for (var i = 0u; i < 8u; i++) {
        let row = m0 + tile_row(i, ty);
        if (row >= p.m) {
            continue;
        }
        for (var j = 0u; j < 2u; j++) {
            let col = n0 + 4u * tx + 64u * j;
            let v = acc[2u * i + j];
            let o = p.c + (row * p.n + col) / 2u;
            if (col < p.n) {
                let w = d_c[o];
                d_c[o] = pack_bf16(scaled_add(bf16_lo(w), bf16_round(v.x)), scaled_add(bf16_hi(w), bf16_round(v.y)));
            }
            if (col + 2u < p.n) {
                let w = d_c[o + 1u];
                d_c[o + 1u] = pack_bf16(scaled_add(bf16_lo(w), bf16_round(v.z)), scaled_add(bf16_hi(w), bf16_round(v.w)));
            }
        }
    }
}

// Small M: the small path's sums with the same epilogue, a thread per output word.
@compute @workgroup_size(128)
fn dense_gemm_tc_scaled_acc_small(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                                  @builtin(local_invocation_index) lid: u32) {
    let gx = group_x(wid, nwg, p.fold);
    if (gx >= p.gx) {
        return;
    }
    let n0 = gx * SN;
    small_sums(n0, 0u, p.k, lid);
    small_publish(lid);
    for (var q = lid; q < M * SN / 2u; q += 128u) {
        let row = q / (SN / 2u);
        let pair = q % (SN / 2u);
        let col = n0 + 2u * pair;
        if (col < p.n) {
            let o = p.c + (row * p.n + col) / 2u;
            let w = d_c[o];
            let t0 = bf16_round(sas[row * SK + 2u * pair]);
            let t1 = bf16_round(sas[row * SK + 2u * pair + 1u]);
            d_c[o] = pack_bf16(scaled_add(bf16_lo(w), t0), scaled_add(bf16_hi(w), t1));
        }
    }
}
