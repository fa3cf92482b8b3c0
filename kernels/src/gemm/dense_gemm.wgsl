// The strict-order dense GEMMs: dense_gemm_bf16, dense_gemm_tc and
// dense_gemm_bf16_pipelined share one tiled shader (one entry point each).
// The tensor-core contracts leave the K order free, but WGSL has no bf16
// matrix units to gain from reordering, so all three sum in the scalar
// order: each equals the CPU reference exactly, and
// dense_gemm_tc_scaled_acc (the same core) equals dense_gemm_tc then
// scaled_add_bf16. The WGSL plan (gemm/mod.rs) launches a (⌈N/128⌉,
// ⌈M/128⌉) grid of tiles, or for M ≤ 16 ⌈N/32⌉ workgroups of the small path
// (dense_gemm_small). The router (router_dot's order, not the scalar one)
// has its own entries, below: dense_gemm_router_chain for M ≤ 64, else the
// dense_gemm_router tiles. On adapters with cooperative matrices,
// dense_gemm_bf16_pipelined at M > 16 runs the f16 matrix-unit path instead
// (dense_coopmat.wgsli, composed only into that variant of this file; its
// numeric contract is stated there).
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


// Router GEMM, prefill entry (M past the plan's chain limit): router_dot's
// order over 64 × 64 output tiles, 256 invocations, invocation (tx, ty) =
// (lid % 16, lid / 16) owning rows 4ty..4ty+3 × columns 4tx..4tx+3 (a Quad:
// a vec4 of columns a row).
// - K is visited partial-major: partials j and j + 1 (j even) at a time,
//   each from +0 in its own accumulator (ev, od), over stages of two rounds
//   of the pair's chunks (chunks j, j + 1 at round r are k in [8(j + 32r),
//   8(j + 32r) + 16), 32 contiguous bytes a row), so each partial still adds
//   its chunks in increasing k. A stage holds 32 k of the tile's 64 rows of
//   A and of B, decoded to f32 in sa / sb (the tile core's arrays) k-major,
//   vec4 q of stage-k kv at kv · 16 + q: kv [0, 8) chunk j of round r,
//   [8, 16) chunk j + 1, [16, 32) the same for round r + 1.
// - The tree, without holding 32 partials: after pair h = j / 2, v = ev + od
//   (the tree's first level, lower index on the left), then a binary
//   counter over named Quads s1..s4: while h's bit b (from b = 0) is set,
//   v = s(b+1) + v, and at the first clear bit s(b+1) = v. So every node
//   of the tree is its two children's sum, the lower-index one on the left,
//   and after h = 15, v is router_dot's p[0].
// - Products of bf16 are exact in f32, so a driver contracting `acc + a * b`
//   into an FMA changes nothing. k past K and rows past M and N stage as +0
//   in both operands: a +0 product leaves a partial (from +0, so never -0)
//   unchanged. Partials with no chunk (K ≤ 8j) stay +0, as router_dot's do,
//   and a pair with none takes no stage.
const RT: u32 = 64u;

struct Quad {
    r0: vec4<f32>,
    r1: vec4<f32>,
    r2: vec4<f32>,
    r3: vec4<f32>,
}

fn quad_add(a: Quad, b: Quad) -> Quad {
    return Quad(a.r0 + b.r0, a.r1 + b.r1, a.r2 + b.r2, a.r3 + b.r3);
}

// q plus the products of staged k [kv0, kv0 + 8) (one chunk), in increasing k.
fn router_chunk(q: Quad, kv0: u32, tx: u32, ty: u32) -> Quad {
    var r = q;
    for (var kv = kv0; kv < kv0 + 8u; kv++) {
        let a = sa[kv * 16u + ty];
        let b = sb[kv * 16u + tx];
        r.r0 = r.r0 + a.x * b;
        r.r1 = r.r1 + a.y * b;
        r.r2 = r.r2 + a.z * b;
        r.r3 = r.r3 + a.w * b;
    }
    return r;
}

// Word w of rows r0..r0+3 of a bf16 matrix (kw words a row, `rows` rows):
// the clamped word indices (base + each row's), zero past either where
// router_quad_keep is false. WGSL cannot pass a storage binding to a
// function, so the loads themselves are router_quad_a's and _b's.
fn router_quad_at(base: u32, r0: u32, rows: u32, kw: u32, w: u32) -> vec4<u32> {
    let last = max(rows, 1u) - 1u;
    let b = base + min(w, kw - 1u);
    return vec4<u32>(b + min(r0, last) * kw, b + min(r0 + 1u, last) * kw, b + min(r0 + 2u, last) * kw, b + min(r0 + 3u, last) * kw);
}

fn router_quad_keep(r0: u32, rows: u32, kw: u32, w: u32) -> vec4<bool> {
    return (vec4<u32>(r0) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(rows)) & vec4<bool>(w < kw);
}

fn router_quad_a(r0: u32, rows: u32, kw: u32, w: u32) -> vec4<u32> {
    let i = router_quad_at(p.a, r0, rows, kw, w);
    return select(vec4<u32>(0u), vec4<u32>(d_a[i.x], d_a[i.y], d_a[i.z], d_a[i.w]), router_quad_keep(r0, rows, kw, w));
}

fn router_quad_b(r0: u32, rows: u32, kw: u32, w: u32) -> vec4<u32> {
    let i = router_quad_at(p.b, r0, rows, kw, w);
    return select(vec4<u32>(0u), vec4<u32>(d_b[i.x], d_b[i.y], d_b[i.z], d_b[i.w]), router_quad_keep(r0, rows, kw, w));
}

@compute @workgroup_size(256)
fn dense_gemm_router(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let gx = group_x(wid, nwg, p.fold);
    if (gx >= p.gx) {
        return;
    }
    let m0 = group_y(wid, p.fold) * RT;
    let n0 = gx * RT;
    let kw = p.k / 2u;
    // Chunks of 8 k (4 words; the last may be shorter).
    let nq = (kw + 3u) / 4u;
    let tx = lid % 16u;
    let ty = lid / 16u;
    // Loader role: row quad lq (0..16) of both tiles, word lw (0..16) of the
    // stage's two 8-word runs (lw < 8: round r's, else round r + 1's).
    let lq = lid / 16u;
    let lw = lid % 16u;
    let run = lw / 8u;
    let i = lw % 8u;
    let kv = run * 16u + (i / 4u) * 8u + 2u * (i % 4u);
    let z = vec4<f32>(0.0);
    let zq = Quad(z, z, z, z);
    var s1 = zq;
    var s2 = zq;
    var s3 = zq;
    var s4 = zq;
    var v = zq;
    for (var j = 0u; j < 32u; j += 2u) {
        var ev = zq;
        var od = zq;
        for (var r = 0u; j + 32u * r < nq; r += 2u) {
            let w = 4u * (j + 32u * r) + lw + run * 120u;
            let va = router_quad_a(m0 + 4u * lq, p.m, kw, w);
            let vb = router_quad_b(n0 + 4u * lq, p.n, kw, w);
            // The previous stage's sums are done with sa / sb.
            workgroupBarrier();
            sa[kv * 16u + lq] = bitcast<vec4<f32>>(va << vec4<u32>(16u));
            sa[(kv + 1u) * 16u + lq] = bitcast<vec4<f32>>(va & vec4<u32>(0xffff0000u));
            sb[kv * 16u + lq] = bitcast<vec4<f32>>(vb << vec4<u32>(16u));
            sb[(kv + 1u) * 16u + lq] = bitcast<vec4<f32>>(vb & vec4<u32>(0xffff0000u));
            workgroupBarrier();
            ev = router_chunk(ev, 0u, tx, ty);
            od = router_chunk(od, 8u, tx, ty);
            ev = router_chunk(ev, 16u, tx, ty);
            od = router_chunk(od, 24u, tx, ty);
        }
        v = quad_add(ev, od);
        // The stack merge; j is the loop's counter, so every branch is uniform.
        let h = j / 2u;
        if ((h & 1u) == 0u) {
            s1 = v;
            continue;
        }
        v = quad_add(s1, v);
        if ((h & 2u) == 0u) {
            s2 = v;
            continue;
        }
        v = quad_add(s2, v);
        if ((h & 4u) == 0u) {
            s3 = v;
            continue;
        }
        v = quad_add(s3, v);
        if ((h & 8u) == 0u) {
            s4 = v;
            continue;
        }
        v = quad_add(s4, v); // h = 15: the root
    }
    let row = m0 + 4u * ty;
    let col = n0 + 4u * tx;
    router_store(row, col, v.r0);
    router_store(row + 1u, col, v.r1);
    router_store(row + 2u, col, v.r2);
    router_store(row + 3u, col, v.r3);
}

// Outputs (row, col..col + 3) as two words, those inside M × N (N is even).
fn router_store(row: u32, col: u32, x: vec4<f32>) {
    if (row < p.m) {
        let o = p.c + (row * p.n + col) / 2u;
        if (col < p.n) {
            d_c[o] = pack_bf16(x.x, x.y);
        }
        if (col + 2u < p.n) {
            d_c[o + 1u] = pack_bf16(x.z, x.w);
        }
    }
}

// Router GEMM, decode entry (M up to the plan's chain limit; the WGSL twin of
// gemm.cu's dense_gemm_router_chain). router_dot's partials are 32 chains of
// K / 256 chunks (11 at K = 2816), which 32 invocations run side by side,
// then a five-level tree, so the time is the trips to memory plus short
// chains, and everything else serves to start every chain at once:
// - Logical grid (⌈N/TC⌉, ⌈M/TR⌉), 256 invocations, tile TR × TC (x0, x1;
//   TC even, TR·TC ≤ 32) kept small so the workgroups spread over the device
//   (M = 1, N = 128: 64 workgroups of 1 × 2).
// - All 256 invocations stage the tile's TR rows of A and TC rows of B in
//   rcs, a vec4 of packed bf16 words per 8-wide chunk (the order's unit), x2
//   chunks a row at a time at row stride x2, the loads of four chunks (16
//   words) issued together as named values. RC_WORDS, an override, is the
//   adapter's workgroup storage in words (the plan's; 4096 = 16 KiB is what
//   every adapter grants), and the plan sizes x2 so (TR + TC) · x2 vec4s fit
//   it: with 48 KiB, K = 2816 stages whole up to a 4 × 4 tile.
// - Invocation t runs partial t % 32 of outputs t / 32, t / 32 + 8, ...
//   (output o = (o / TC, o % TC)): from +0, its chunks in increasing k
//   across the staged pieces, the four outputs' accumulators held in named
//   registers between pieces. An output's 32 partials are 32 consecutive
//   invocations, so their loads are consecutive vec4s. Products of bf16 are
//   exact in f32, so a driver contracting `acc + a * b` into an FMA changes
//   nothing.
// - The partials go through rcs (partial j of output o in vec4 32o + j, .x);
//   an invocation per column pair adds each output's 32 in router_dot's
//   tree, written out, and stores the pair as one word. k past K and rows
//   past M and N stage as +0 (a +0 product leaves a partial, which starts at
//   +0 and so is never -0, unchanged) and store nothing.
override RC_WORDS: u32 = 4096u;
var<workgroup> rcs: array<vec4<u32>, RC_WORDS / 4u>;

// Chunk q of staged row s (A's TR rows, then B's TC): the four words, zero
// past K, M or N; indices clamped into the matrix so the loads issue
// unconditionally.
fn rc_chunk(s: u32, q: u32, tr: u32, row0: u32, col0: u32, kw: u32) -> vec4<u32> {
    let w = 4u * q;
    let last = kw - 1u;
    let ok = vec4<u32>(w) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(kw);
    if (s < tr) {
        let o = p.a + min(row0 + s, p.m - 1u) * kw;
        let v = vec4<u32>(d_a[o + min(w, last)], d_a[o + min(w + 1u, last)], d_a[o + min(w + 2u, last)], d_a[o + min(w + 3u, last)]);
        return select(vec4<u32>(0u), v, ok & vec4<bool>(row0 + s < p.m));
    }
    let o = p.b + min(col0 + s - tr, p.n - 1u) * kw;
    let v = vec4<u32>(d_b[o + min(w, last)], d_b[o + min(w + 1u, last)], d_b[o + min(w + 2u, last)], d_b[o + min(w + 3u, last)]);
    return select(vec4<u32>(0u), v, ok & vec4<bool>(col0 + s - tr < p.n));
}

// Item idx of a piece of nc chunks a row from chunk q0 (row idx / nc); items
// past the piece clamp to its last row and load zeros past K or nothing used.
fn rc_item(idx: u32, nc: u32, q0: u32, rows: u32, tr: u32, row0: u32, col0: u32, kw: u32) -> vec4<u32> {
    let s = min(idx / nc, rows - 1u);
    return rc_chunk(s, q0 + idx - s * nc, tr, row0, col0, kw);
}

// acc plus staged chunks c0, c0 + 32, ... below nc of rows ar and br (vec4
// offsets in rcs), in increasing k.
fn rc_partial(acc: f32, ar: u32, br: u32, c0: u32, nc: u32) -> f32 {
    var s = acc;
    for (var c = c0; c < nc; c += 32u) {
        let x = rcs[ar + c];
        let y = rcs[br + c];
        s = s + bf16_lo(x.x) * bf16_lo(y.x);
        s = s + bf16_hi(x.x) * bf16_hi(y.x);
        s = s + bf16_lo(x.y) * bf16_lo(y.y);
        s = s + bf16_hi(x.y) * bf16_hi(y.y);
        s = s + bf16_lo(x.z) * bf16_lo(y.z);
        s = s + bf16_hi(x.z) * bf16_hi(y.z);
        s = s + bf16_lo(x.w) * bf16_lo(y.w);
        s = s + bf16_hi(x.w) * bf16_hi(y.w);
    }
    return s;
}

// The tree's first three levels over partials b..b+7 (vec4s of rcs, .x).
fn rc_tree8(b: u32) -> f32 {
    let p0 = bitcast<f32>(rcs[b].x);
    let p1 = bitcast<f32>(rcs[b + 1u].x);
    let p2 = bitcast<f32>(rcs[b + 2u].x);
    let p3 = bitcast<f32>(rcs[b + 3u].x);
    let p4 = bitcast<f32>(rcs[b + 4u].x);
    let p5 = bitcast<f32>(rcs[b + 5u].x);
    let p6 = bitcast<f32>(rcs[b + 6u].x);
    let p7 = bitcast<f32>(rcs[b + 7u].x);
    return ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7));
}

// Output o's sum: router_dot's tree over its 32 partials.
fn rc_tree(o: u32) -> f32 {
    let b = 32u * o;
    return (rc_tree8(b) + rc_tree8(b + 8u)) + (rc_tree8(b + 16u) + rc_tree8(b + 24u));
}

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
    let row0 = group_y(wid, p.fold) * tr;
    let col0 = gx * tc;
    let kw = p.k / 2u;
    let nq = (kw + 3u) / 4u;
    let rows = tr + tc;
    let outs = tr * tc;
    let j = lid % 32u;
    let o0 = lid / 32u;
    let o1 = o0 + 8u;
    let o2 = o0 + 16u;
    let o3 = o0 + 24u;
    var acc0 = 0.0;
    var acc1 = 0.0;
    var acc2 = 0.0;
    var acc3 = 0.0;
    for (var q0 = 0u; q0 < nq; q0 += cw) {
        let nc = min(cw, nq - q0);
        let total = rows * nc;
        // The previous piece's chains are done with rcs.
        workgroupBarrier();
        for (var base = lid; base < total; base += 1024u) {
            let i1 = base + 256u;
            let i2 = base + 512u;
            let i3 = base + 768u;
            let v0 = rc_item(base, nc, q0, rows, tr, row0, col0, kw);
            let v1 = rc_item(i1, nc, q0, rows, tr, row0, col0, kw);
            let v2 = rc_item(i2, nc, q0, rows, tr, row0, col0, kw);
            let v3 = rc_item(i3, nc, q0, rows, tr, row0, col0, kw);
            rcs[(base / nc) * cw + base % nc] = v0;
            if (i1 < total) {
                rcs[(i1 / nc) * cw + i1 % nc] = v1;
            }
            if (i2 < total) {
                rcs[(i2 / nc) * cw + i2 % nc] = v2;
            }
            if (i3 < total) {
                rcs[(i3 / nc) * cw + i3 % nc] = v3;
            }
        }
        workgroupBarrier();
        // This invocation's first chunk of the piece: chunk c is partial c % 32.
        let c0 = (j + 32u - q0 % 32u) % 32u;
        if (o0 < outs) {
            acc0 = rc_partial(acc0, (o0 / tc) * cw, (tr + o0 % tc) * cw, c0, nc);
        }
        if (o1 < outs) {
            acc1 = rc_partial(acc1, (o1 / tc) * cw, (tr + o1 % tc) * cw, c0, nc);
        }
        if (o2 < outs) {
            acc2 = rc_partial(acc2, (o2 / tc) * cw, (tr + o2 % tc) * cw, c0, nc);
        }
        if (o3 < outs) {
            acc3 = rc_partial(acc3, (o3 / tc) * cw, (tr + o3 % tc) * cw, c0, nc);
        }
    }
    workgroupBarrier();
    if (o0 < outs) {
        rcs[32u * o0 + j] = vec4<u32>(bitcast<u32>(acc0), 0u, 0u, 0u);
    }
    if (o1 < outs) {
        rcs[32u * o1 + j] = vec4<u32>(bitcast<u32>(acc1), 0u, 0u, 0u);
    }
    if (o2 < outs) {
        rcs[32u * o2 + j] = vec4<u32>(bitcast<u32>(acc2), 0u, 0u, 0u);
    }
    if (o3 < outs) {
        rcs[32u * o3 + j] = vec4<u32>(bitcast<u32>(acc3), 0u, 0u, 0u);
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
            d_c[p.c + (row * p.n + col) / 2u] = pack_bf16(rc_tree(o), rc_tree(o + 1u));
        }
    }
}
