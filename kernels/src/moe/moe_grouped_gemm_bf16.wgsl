// Grouped expert GEMM, bf16 weights [e, N, K] (the tiling is
// grouped_gemm.wgsli's: 16-row x 64-column output tiles, one pass per expert
// present, K in chunks of 32 through workgroup memory). The weight chunk is
// transposed on its way in so a k step reads two neighbouring columns; rows
// outside every segment are stored as zeros.
struct Params {
    out: u32, a: u32, w: u32, offsets: u32, n: i32, e: i32, big_n: i32, big_k: i32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_a: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_w: array<u32>;
@group(0) @binding(4) var<storage, read_write> d_offsets: array<u32>;

//! include "moe/grouped_gemm.wgsli"

// w_s[k][n] for k words k0..k0 + KC/2 of expert x's rows n0..n0 + TN.
fn stage_w(x: i32, n0: u32, k0: u32, kw: u32, lid: u32) {
    let big_n = u32(p.big_n);
    let wbase = p.w + window_expert(x) * big_n * kw;
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
}

fn store(o: u32, x: i32, a0: f32, a1: f32) {
    d_out[o] = pack_bf16(a0, a1);
}

@compute @workgroup_size(128)
fn moe_grouped_gemm_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                         @builtin(local_invocation_index) lid: u32) {
    grouped_gemm(wid, nwg, lid);
}

// Decode sizes (plan: grid (ceil(N / SEG_COLS), n)): the workgroup of slot s
// owns the segment that starts at s (the others of that segment return), so
// each selected expert's weights stream once, over N / SEG_COLS workgroups
// instead of the few 16-row tiles above. SEG_LANES invocations share a
// weight row, reading interleaved 16-byte chunks; the segment's activation
// rows go SEG_R at a time (longer segments read the weights again). The
// lanes' f32 partials meet in workgroup memory and are added in lane order.
const SEG_COLS: u32 = 32u;

// One chunk of a weight row a round (segment_gemv.wgsli): four measured
// slower on the H200 (26b-a4b's expert down, K = 704: 24.0 against 21.7 us a
// dispatch; batch 16 decode 521 against 572 tok/s), fourteenth session.
override SEG_U: u32 = 1u;
//! include "moe/segment_gemv.wgsli"

@compute @workgroup_size(256)
fn moe_grouped_gemm_bf16_seg(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                             @builtin(local_invocation_index) lid: u32) {
    let cb = group_x(wid, nwg, p.fold);
    let s = group_y(wid, p.fold);
    if (cb >= p.gx || s >= p.gy) {
        return;
    }
    let info = segment_role(s, lid);
    let big_n = u32(p.big_n);
    let half = big_n / 2u; // words per output row
    let lr = lid / SEG_LANES;
    let t = lid % SEG_LANES;
    let j = cb * SEG_COLS + lr;
    if (info[0] == 2) {
        return;
    }
    if (info[0] == 1) {
        if (t == 0u && lr % 2u == 0u && j < big_n) {
            d_out[p.out + s * half + j / 2u] = 0u;
        }
        return;
    }
    let kw = u32(p.big_k) / 2u; // words per row of a and w
    let wrow = p.w + (window_expert(info[3]) * big_n + min(j, big_n - 1u)) * kw;
    for (var r0 = info[1]; r0 < info[2]; r0 += i32(SEG_R)) {
        let nr = u32(min(i32(SEG_R), info[2] - r0));
        segment_partials(wrow, kw, u32(r0), nr, t, lid);
        workgroupBarrier();
        // Invocation r · 16 + q: row r0 + r, columns 2q and 2q + 1 of the block.
        if (lid < 16u * SEG_R) {
            let q = lid % 16u;
            let r = lid / 16u;
            let jj = cb * SEG_COLS + 2u * q;
            if (r < nr && jj < big_n) {
                var v0 = 0.0;
                var v1 = 0.0;
                for (var u = 0u; u < SEG_LANES; u++) {
                    v0 += seg_sums[r * 256u + 2u * q * SEG_LANES + u];
                    v1 += seg_sums[r * 256u + (2u * q + 1u) * SEG_LANES + u];
                }
                d_out[p.out + (u32(r0) + r) * half + jj / 2u] = pack_bf16(v0, v1);
            }
        }
        workgroupBarrier();
    }
}
