// The strict-order dense GEMMs: dense_gemm_bf16, dense_gemm_router,
// dense_gemm_tc and dense_gemm_bf16_pipelined share one tiled shader (one
// entry point each). The tensor-core contracts leave the K order free, but
// WGSL has no bf16 matrix units to gain from reordering, so all four sum in
// the scalar order: each equals the CPU reference exactly, the router equals
// dense_gemm_bf16 by construction, and dense_gemm_tc_scaled_acc (the same
// core) equals dense_gemm_tc then scaled_add_bf16. The WGSL plan
// (gemm/mod.rs) launches a (⌈N/128⌉, ⌈M/128⌉) grid of tiles, or
// for M ≤ 16 ⌈N/32⌉ workgroups of the small path (dense_gemm_small); the
// router takes its decode entry (dense_gemm_router_chain, below) for M ≤ 64.
// On adapters with cooperative matrices, dense_gemm_bf16_pipelined at M > 16
// runs the f16 matrix-unit path instead (dense_coopmat.wgsli, composed only
// into that variant of this file; its numeric contract is stated there).
struct Params {
    a: u32, b: u32, c: u32, m: u32, n: u32, k: u32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_a: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_b: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_c: array<u32>;

//! include "gemm/dense_tile_core.wgsli"
//! coopmat "gemm/dense_coopmat.wgsli"

// c = bf16(acc); N is even, so every column pair is one output word.
fn dense(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) {
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
                d_c[o] = pack_bf16(v.x, v.y);
            }
            if (col + 2u < p.n) {
                d_c[o + 1u] = pack_bf16(v.z, v.w);
            }
        }
    }
}

@compute @workgroup_size(256)
fn dense_gemm_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    dense(wid, nwg, lid);
}

@compute @workgroup_size(256)
fn dense_gemm_router(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    dense(wid, nwg, lid);
}

@compute @workgroup_size(256)
fn dense_gemm_tc(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    dense(wid, nwg, lid);
}

@compute @workgroup_size(256)
fn dense_gemm_bf16_pipelined(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                             @builtin(local_invocation_index) lid: u32) {
    dense(wid, nwg, lid);
}

// Small M: c = bf16(acc) from the small path, a thread per output word.
@compute @workgroup_size(128)
fn dense_gemm_small(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
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
            d_c[p.c + (row * p.n + col) / 2u] = pack_bf16(sas[row * SK + 2u * pair], sas[row * SK + 2u * pair + 1u]);
        }
    }
}

// Router GEMM, decode entry (M up to the plan's chain limit; the WGSL twin of
// gemm.cu's dense_gemm_router_chain). Each output is one chain of K dependent
// adds that cannot be split or reordered, so the time is that chain plus the
// trips to memory, and everything else serves to start every chain at once:
// - Logical grid (⌈N/TC⌉, ⌈M/TR⌉), 256 invocations, tile TR × TC (x0, x1;
//   TC even, TR·TC ≤ 32) kept small so the workgroups spread over the device
//   (M = 1, N = 128: 64 workgroups of 1 × 2).
// - All 256 invocations stage the tile's TR rows of A and TC rows of B as
//   packed bf16 words in rcs, x2 words (2·x2 k) a row per chunk at row stride
//   x3 (odd, so the chain lanes' rows fall in distinct banks), RC_BATCH loads
//   in flight per invocation. RC_WORDS, an override, is the adapter's
//   workgroup storage in words (the plan's; 4096 = 16 KiB is what every
//   adapter grants), and the plan sizes the chunk so (TR + TC) · x3 ≤
//   RC_WORDS: with 48 KiB, K = 2816 stages whole up to a 4 × 4 tile.
// - Invocation t < TR·TC owns output (t / TC, t % TC) and adds its products
//   from +0 in strictly increasing k across the chunks. A bf16 × bf16 product
//   is exact in f32, so a driver contracting `acc + a * b` into an FMA
//   changes nothing (as in dense_tile_core.wgsli).
// - The sums go through rcs so that one invocation stores each column pair
//   as a whole word. Rows and columns past M and N stage as zeros and store
//   nothing.
override RC_WORDS: u32 = 4096u;
const RC_BATCH: u32 = 16u;
var<workgroup> rcs: array<u32, RC_WORDS>;

@compute @workgroup_size(256)
fn dense_gemm_router_chain(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                           @builtin(local_invocation_index) lid: u32) {
    let gx = group_x(wid, nwg, p.fold);
    if (gx >= p.gx) {
        return;
    }
    let tr = p.x0;
    let tc = p.x1;
    let cw = p.x2;
    let ld = p.x3;
    let row0 = group_y(wid, p.fold) * tr;
    let col0 = gx * tc;
    let kw = p.k / 2u;
    let rows = tr + tc;
    let chain = lid < tr * tc;
    let ar = (lid / tc) * ld;
    let br = (tr + lid % tc) * ld;
    var acc = 0.0;
    for (var w0 = 0u; w0 < kw; w0 += cw) {
        let nw = min(cw, kw - w0);
        let total = rows * nw;
        // The previous chunk's chains are done with rcs.
        workgroupBarrier();
        for (var base = lid; base < total; base += RC_BATCH * 256u) {
            var v: array<u32, RC_BATCH>;
            for (var u = 0u; u < RC_BATCH; u++) {
                let idx = base + u * 256u;
                let s = idx / nw;
                let w = w0 + idx - s * nw;
                v[u] = 0u;
                if (idx < total) {
                    if (s < tr) {
                        if (row0 + s < p.m) {
                            v[u] = d_a[p.a + (row0 + s) * kw + w];
                        }
                    } else if (col0 + s - tr < p.n) {
                        v[u] = d_b[p.b + (col0 + s - tr) * kw + w];
                    }
                }
            }
            for (var u = 0u; u < RC_BATCH; u++) {
                let idx = base + u * 256u;
                if (idx < total) {
                    let s = idx / nw;
                    rcs[s * ld + idx - s * nw] = v[u];
                }
            }
        }
        workgroupBarrier();
        if (chain) {
            for (var w = 0u; w < nw; w++) {
                let x = rcs[ar + w];
                let y = rcs[br + w];
                acc = acc + bf16_lo(x) * bf16_lo(y);
                acc = acc + bf16_hi(x) * bf16_hi(y);
            }
        }
    }
    workgroupBarrier();
    if (chain) {
        rcs[lid] = bitcast<u32>(acc);
    }
    workgroupBarrier();
    let half = tc / 2u;
    if (lid < tr * half) {
        let r = lid / half;
        let cp = 2u * (lid % half);
        let row = row0 + r;
        let col = col0 + cp;
        if (row < p.m && col < p.n) {
            let o = r * tc + cp;
            d_c[p.c + (row * p.n + col) / 2u] = pack_bf16(bitcast<f32>(rcs[o]), bitcast<f32>(rcs[o + 1u]));
        }
    }
}
