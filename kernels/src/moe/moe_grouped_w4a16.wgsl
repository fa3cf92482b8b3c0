// Grouped expert GEMM, NVFP4 weights (K-major per expert: codes [e, K/2, N],
// e4m3 block scales [e, K/16, N], f32 global scale per expert); the same
// tiling as moe_grouped_gemm_bf16.wgsl, with the weight chunk decoded to
// f32 (e2m1 · e4m3, exact) on its way into workgroup memory and the
// expert's global scale applied at the store. A workgroup owns a 16-row x
// 64-column output tile; each of its rows looks up its expert (binary search
// of offsets). Segments are long in practice, so a tile usually holds one
// expert; a tile that straddles a segment boundary runs one pass per expert
// present, each pass accumulating only its own rows. Per pass, K is walked
// in chunks of 32: the A chunk (16 x 32) and the expert's weight chunk
// (32 x 64, [k][n] as the K-major codes already are) go through
// workgroup memory; each thread accumulates 4 rows x 2 columns in f32 and
// stores one packed word per row. Rows outside every segment keep zero
// accumulators and are stored as zeros.
struct Params {
    out: u32, a: u32, wq: u32, ws: u32, scale2: u32, offsets: u32, n: i32, e: i32, big_n: i32, big_k: i32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_a: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_wq: array<u32>;
@group(0) @binding(4) var<storage, read_write> d_ws: array<u32>;
@group(0) @binding(5) var<storage, read_write> d_scale2: array<u32>;
@group(0) @binding(6) var<storage, read_write> d_offsets: array<u32>;

const TM: u32 = 16u;
const TN: u32 = 64u;
const KC: u32 = 32u;

var<workgroup> a_s: array<f32, 512>; // [TM][KC]
var<workgroup> w_s: array<f32, 2048>; // [KC][TN]
var<workgroup> row_x: array<i32, TM>;
var<workgroup> row_done: array<u32, TM>;
var<workgroup> cur_x: i32;

// e2m1 magnitude codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign.
fn e2m1(c: u32) -> f32 {
    let mag = c & 7u;
    let v = select(f32(mag) * 0.5, ldexp(1.0 + 0.5 * f32(mag & 1u), i32(mag >> 1u) - 1), mag >= 2u);
    return select(v, -v, (c & 8u) != 0u);
}

fn offset(x: u32) -> i32 {
    return bitcast<i32>(d_offsets[p.offsets + x]);
}

// Expert whose segment [offsets[x], offsets[x+1]) holds row s, or −1.
fn expert_of(s: i32) -> i32 {
    let e = u32(p.e);
    if (offset(0u) > s) {
        return -1;
    }
    var lo = 0u; // offsets[lo] <= s
    var hi = e; // answer < hi
    while (hi - lo > 1u) {
        let mid = (lo + hi) / 2u;
        if (offset(mid) <= s) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return select(-1, i32(lo), s < offset(lo + 1u));
}

@compute @workgroup_size(128)
fn moe_grouped_w4a16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                         @builtin(local_invocation_index) lid: u32) {
    // Row tiles on x (plan.rs swaps the launcher's grid: x is the dimension that folds).
    let ty = group_x(wid, nwg, p.fold);
    let tx = group_y(wid, p.fold);
    if (ty >= p.gx || tx >= p.gy) {
        return;
    }
    let n = u32(p.n);
    let big_n = u32(p.big_n);
    let kw = u32(p.big_k) / 2u; // words per row of a and w
    let row0 = ty * TM;
    let n0 = tx * TN;
    if (lid < TM) {
        let s = row0 + lid;
        row_x[lid] = select(-1, expert_of(i32(s)), s < n);
        row_done[lid] = 0u;
    }
    let cg = lid % 32u;
    let rg = lid / 32u;
    var acc: array<f32, 8>; // rows rg*4 + i, columns n0 + 2cg + {0, 1}
    for (var i = 0u; i < 8u; i++) {
        acc[i] = 0.0;
    }
    loop {
        workgroupBarrier();
        if (lid == 0u) {
            var c = -1;
            for (var r = 0u; r < TM; r++) {
                if (c < 0 && row_x[r] >= 0 && row_done[r] == 0u) {
                    c = row_x[r];
                }
                if (c >= 0 && row_x[r] == c) {
                    row_done[r] = 1u;
                }
            }
            cur_x = c;
        }
        let x = workgroupUniformLoad(&cur_x);
        if (x < 0) {
            break;
        }
        // Byte rows of N codes / scales are word aligned (N % 16 == 0).
        let nw = big_n / 4u;
        let qbase = p.wq + u32(x) * kw * nw;
        let sbase = p.ws + u32(x) * (u32(p.big_k) / 16u) * nw;
        for (var k0 = 0u; k0 < kw; k0 += KC / 2u) {
            for (var i = lid; i < TM * KC / 2u; i += 128u) {
                let r = i / (KC / 2u);
                let c = i % (KC / 2u);
                var v = 0u;
                if (row_x[r] == x && k0 + c < kw) {
                    v = d_a[p.a + (row0 + r) * kw + k0 + c];
                }
                a_s[r * KC + 2u * c] = bf16_lo(v);
                a_s[r * KC + 2u * c + 1u] = bf16_hi(v);
            }
            // KC/2 code rows (k pairs) x TN/4 words, each word four columns.
            for (var i = lid; i < (KC / 2u) * (TN / 4u); i += 128u) {
                let kr = i / (TN / 4u);
                let c = i % (TN / 4u);
                var q = 0u;
                var sc = 0u;
                if (n0 + 4u * c < big_n && k0 + kr < kw) {
                    q = d_wq[qbase + (k0 + kr) * nw + n0 / 4u + c];
                    sc = d_ws[sbase + ((k0 + kr) / 8u) * nw + n0 / 4u + c];
                }
                for (var b = 0u; b < 4u; b++) {
                    let code = q >> (8u * b);
                    let s = e4m3(sc >> (8u * b));
                    w_s[(2u * kr) * TN + 4u * c + b] = e2m1(code) * s;
                    w_s[(2u * kr + 1u) * TN + 4u * c + b] = e2m1(code >> 4u) * s;
                }
            }
            workgroupBarrier();
            for (var i = 0u; i < 4u; i++) {
                let r = rg * 4u + i;
                if (row_x[r] != x) {
                    continue;
                }
                var s0 = acc[2u * i];
                var s1 = acc[2u * i + 1u];
                for (var kk = 0u; kk < KC; kk++) {
                    let a = a_s[r * KC + kk];
                    s0 += a * w_s[kk * TN + 2u * cg];
                    s1 += a * w_s[kk * TN + 2u * cg + 1u];
                }
                acc[2u * i] = s0;
                acc[2u * i + 1u] = s1;
            }
            workgroupBarrier();
        }
    }
    if (n0 + 2u * cg >= big_n) {
        return;
    }
    for (var i = 0u; i < 4u; i++) {
        let s = row0 + rg * 4u + i;
        if (s < n) {
            // Rows outside every segment store zeros (no expert, no global scale).
            let x = row_x[rg * 4u + i];
            let s2 = select(0.0, bitcast<f32>(d_scale2[p.scale2 + u32(max(x, 0))]), x >= 0);
            d_out[p.out + s * (big_n / 2u) + n0 / 2u + cg] = pack_bf16(s2 * acc[2u * i], s2 * acc[2u * i + 1u]);
        }
    }
}
