// dense_gemv_gelu_mul_bf16: c[i, j] = bf16(bf16(gelu_tanh(bf16(g))) · bf16(u))
// with g, u the f32 sums of activation row i against gate row j and up row
// n + j, for m ≤ 16. The weight stream and the reduction are
// gemv_common.wgsli's; workgroup (g, s) owns output columns [64 g, +64):
// its local rows 0..63 are those gate rows and 64..127 the matching up rows
// (so each weight row is still read once), over K chunk s,
// [s · x0, (s + 1) · x0) ∩ [0, k).
//
// One chunk (x1 = 1): dense_gemv_gelu_mul_bf16 writes bf16 outputs, an
// invocation per pair of adjacent columns. Several:
// dense_gemv_gelu_mul_bf16_partial writes the f32 sums to workspace
// [chunks, m, 2n] (gate sums at column j, up sums at n + j), and
// dense_gemv_gelu_mul_bf16_reduce (an invocation per output word, x0 =
// chunks) adds them from the first chunk in order and applies the epilogue.
// m = 1 with enough rows: dense_gemv_gelu_mul_bf16_m1 (gemv_m1.wgsli), one
// pass; workgroup g owns columns [4 g, +4), slots 0..3 their gate rows and
// 4..7 their up rows.
struct Params {
    a: u32, b: u32, c: u32, m: u32, n: u32, k: u32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_a: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> d_b: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> d_c: array<atomic<u32>>;
@group(0) @binding(4) var<storage, read_write> d_workspace: array<u32>;

//! include "gemv/gemv_m1.wgsli"

// Vector c of activation row i, as stored.
fn activation(i: u32, c: u32) -> vec4<u32> {
    return d_a[p.a / 4u + i * (p.k / 8u) + c];
}

fn m1_activation(c: u32) -> vec4<u32> {
    return activation(0u, c);
}

// Output columns per workgroup.
const NC: u32 = 64u;

// Local row lr: gate row of column 64 g + lr (lr < 64), else up row of
// column 64 g + lr - 64. Columns past n read the last column's rows (in
// bounds); their sums are dropped.
fn weight_row(g: u32, lr: u32) -> u32 {
    let j = min(g * NC + lr % NC, p.n - 1u);
    return select(j, p.n + j, lr >= NC);
}

// Slot r of workgroup g on the m = 1 path: gate row of column 4 g + r
// (r < 4), else up row of column 4 g + r - 4; past n the last column's.
fn m1_row(g: u32, r: u32) -> u32 {
    let j = min(g * 4u + r % 4u, p.n - 1u);
    return select(j, p.n + j, r >= 4u);
}

//! include "util/gelu_tanh.wgsli"

// The unfused path's roundings: gate and up sums to bf16 (as a GEMM output
// would be), the activation to bf16 before the multiply; the caller rounds
// the product.
fn gelu_mul(g: f32, u: f32) -> f32 {
    return bf16_round(gelu_tanh(bf16_round(g))) * bf16_round(u);
}

fn chunk_bounds(s: u32) -> vec2<u32> {
    let k0 = min(s * p.x0, p.k);
    return vec2<u32>(k0, min(k0 + p.x0, p.k));
}

@compute @workgroup_size(256)
fn dense_gemv_gelu_mul_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                            @builtin(local_invocation_index) lid: u32) {
    let g = group_x(wid, nwg, p.fold);
    if (g >= p.gx) {
        return;
    }
    var acc: array<vec4<f32>, 16>;
    gemv_stream(g, 0u, p.k, lid, &acc);
    // Invocation t < 64: activation row i0 + t / 32, columns 2 (t % 32) and the next.
    let ii = lid / 32u;
    let lc = 2u * (lid % 32u);
    let j = g * NC + lc;
    for (var i0 = 0u; i0 < M; i0 += 2u) {
        stage_rows(&acc, i0, lid);
        workgroupBarrier();
        let i = i0 + ii;
        if (lid < 64u && i < M && j < p.n) {
            let has1 = j + 1u < p.n;
            let x0 = gelu_mul(slot_sum(ii, lc), slot_sum(ii, NC + lc));
            let x1 = gelu_mul(slot_sum(ii, lc + 1u), slot_sum(ii, NC + lc + 1u));
            store_two(i * p.n + j, x0, i * p.n + j + 1u, x1, has1);
        }
        workgroupBarrier();
    }
}

@compute @workgroup_size(256)
fn dense_gemv_gelu_mul_bf16_partial(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                                    @builtin(local_invocation_index) lid: u32) {
    let g = group_x(wid, nwg, p.fold);
    if (g >= p.gx) {
        return;
    }
    let s = group_y(wid, p.fold);
    let kb = chunk_bounds(s);
    var acc: array<vec4<f32>, 16>;
    gemv_stream(g, kb.x, kb.y, lid, &acc);
    // Invocation t: activation row i0 + t / 128, local row t % 128.
    let ii = lid / NR;
    let lr = lid % NR;
    let j = g * NC + lr % NC;
    let col = select(j, p.n + j, lr >= NC);
    for (var i0 = 0u; i0 < M; i0 += 2u) {
        stage_rows(&acc, i0, lid);
        workgroupBarrier();
        let i = i0 + ii;
        if (i < M && j < p.n) {
            d_workspace[(s * M + i) * 2u * p.n + col] = bitcast<u32>(slot_sum(ii, lr));
        }
        workgroupBarrier();
    }
}

// Column j of activation row i summed over the chunks, in chunk order.
fn chunk_sum(i: u32, j: u32) -> f32 {
    let plane = 2u * p.m * p.n;
    let o = i * 2u * p.n + j;
    var s = bitcast<f32>(d_workspace[o]);
    for (var t = 1u; t < p.x0; t++) {
        s += bitcast<f32>(d_workspace[t * plane + o]);
    }
    return s;
}

fn reduced(e: u32) -> f32 {
    let i = e / p.n;
    let j = e % p.n;
    return gelu_mul(chunk_sum(i, j), chunk_sum(i, p.n + j));
}

@compute @workgroup_size(256)
fn dense_gemv_gelu_mul_bf16_reduce(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                                   @builtin(local_invocation_index) lid: u32) {
    let w = group_x(wid, nwg, p.fold) * 256u + lid;
    let total = p.m * p.n;
    if (w >= (total + 1u) / 2u) {
        return;
    }
    let e = 2u * w;
    let has1 = e + 1u < total;
    store_two(e, reduced(e), e + 1u, select(0.0, reduced(min(e + 1u, total - 1u)), has1), has1);
}

@compute @workgroup_size(256)
fn dense_gemv_gelu_mul_bf16_m1(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                               @builtin(local_invocation_index) lid: u32) {
    let g = group_x(wid, nwg, p.fold);
    if (g >= p.gx) {
        return;
    }
    m1_rows(g, lid);
    // Invocation t < 2: columns 4 g + 2t and the next.
    let j = g * 4u + 2u * lid;
    if (lid < 2u && j < p.n) {
        let has1 = j + 1u < p.n;
        let x0 = gelu_mul(m1_slot_sum(2u * lid), m1_slot_sum(4u + 2u * lid));
        let x1 = gelu_mul(m1_slot_sum(2u * lid + 1u), m1_slot_sum(5u + 2u * lid));
        store_two(j, x0, j + 1u, x1, has1);
    }
}
