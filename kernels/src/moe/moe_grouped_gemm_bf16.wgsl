// Grouped expert GEMM, bf16 weights [e, N, K]. A workgroup owns a 16-row x
// 64-column output tile; each of its rows looks up its expert (binary search
// of offsets). Segments are long in practice, so a tile usually holds one
// expert; a tile that straddles a segment boundary runs one pass per expert
// present, each pass accumulating only its own rows. Per pass, K is walked
// in chunks of 32: the A chunk (16 x 32) and the expert's weight chunk
// (32 x 64, transposed so a k step reads two neighbouring columns) go through
// workgroup memory; each thread accumulates 4 rows x 2 columns in f32 and
// stores one packed word per row. Rows outside every segment keep zero
// accumulators and are stored as zeros.
struct Params {
    out: u32, a: u32, w: u32, offsets: u32, n: i32, e: i32, big_n: i32, big_k: i32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_a: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_w: array<u32>;
@group(0) @binding(4) var<storage, read_write> d_offsets: array<u32>;

const TM: u32 = 16u;
const TN: u32 = 64u;
const KC: u32 = 32u;

var<workgroup> a_s: array<f32, 512>; // [TM][KC]
var<workgroup> w_s: array<f32, 2048>; // [KC][TN]
var<workgroup> row_x: array<i32, TM>;
var<workgroup> row_done: array<u32, TM>;
var<workgroup> cur_x: i32;

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
fn moe_grouped_gemm_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
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
        let wbase = p.w + u32(x) * big_n * kw;
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
            for (var i = lid; i < TN * KC / 2u; i += 128u) {
                let col = i / (KC / 2u);
                let c = i % (KC / 2u);
                var v = 0u;
                if (n0 + col < big_n && k0 + c < kw) {
                    v = d_w[wbase + (n0 + col) * kw + k0 + c];
                }
                w_s[(2u * c) * TN + col] = bf16_lo(v);
                w_s[(2u * c + 1u) * TN + col] = bf16_hi(v);
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
            d_out[p.out + s * (big_n / 2u) + n0 / 2u + cg] = pack_bf16(acc[2u * i], acc[2u * i + 1u]);
        }
    }
}
