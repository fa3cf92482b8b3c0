// Split decode attention in two entry points over the plan's workspace
// (bound from its start after the pointer bindings): f32 o
// [batch][nh][S][hd], then (m, l) [batch][nh][S][2], with
// S = decode_splits(visible_keys(max_ctx)) the most chunks any sequence can
// use (kernels/src/attn/mod.rs defines the rule). Each sequence's own chunk
// count comes from its ctx_len; chunks past it are idle (their workgroups
// write nothing, the combine stops at the sequence's count), so
// max_ctx can stay fixed across decode steps without changing a bit.
//
// attention_decode (phase 1). A workgroup owns one (sequence b, chunk, KV
// head) and up to x0 = hpw of the query heads that read that KV head
// (grid y = nkv · x1 chunks of the group), so each K/V row is streamed from
// memory once and shared by the group's heads (GQA).
//
// Per tile of KT keys: the slots are looked up once, K and V rows are copied
// into workgroup memory with consecutive threads on consecutive words
// (coalesced), then scores for every (head, key) pair, the online-softmax
// update per head (running max m, rescale factor alpha), and P·V with each
// thread holding a slice of the head's f32 accumulator in registers.
//
// Workgroup memory is tile_common.wgsli's pool, with M = next_pow2(hpw)
// query rows; where max_ctx allows no chunk longer than MIN_SPLIT_KEYS,
// the plan sizes it (the POOL override) so that a chunk is one tile, as far
// as the adapter's workgroup storage holds it. The q rows and each tile's K/V rows are copied CP_U words an
// invocation at a time, every load issued before any is stored: at short
// contexts a decode launch is a chain of memory round trips, and this makes
// a tile one round trip instead of one per word.
//
// The whole window's block-table entries are validated first: an invalid
// sequence or page (or ctx_len outside 1..=max_ctx) makes every chunk NaN
// (m, l and o), as the reference, so the reduce yields a NaN row. An empty
// or idle chunk writes m = −inf, l = 0, o = 0.
//
// attention_decode_once (the plan's choice at up to 16 chunks): phase 1,
// then the last of a (sequence, query-head group)'s S workgroups to arrive
// (one of the backend's arrival counters each, which it puts back to zero)
// combines the group's heads as phase 2 would, in the same launch: on the
// H200 phase 2 was a dispatch of about 11 us a layer at short contexts. The
// workspace is read and written through atomics so that the last
// workgroup's loads come from where the others' stores went.
//
// attention_decode_reduce (phase 2): one workgroup per (sequence, head),
// each thread a packed output word (two dims), the chunks' (m, l) staged in
// workgroup memory (the pool's first 2·S words) first. Chunks are combined in chunk
// order: M = max of the used m, out = bf16(Σ e^{m_s−M} o_s / Σ e^{m_s−M} l_s).
// An empty chunk (m = −inf or l = 0) is skipped, so e^{−inf − M} never meets
// M = −inf; all chunks empty gives a NaN row, and a NaN m (an invalid
// sequence) propagates to the row, as the reference.
struct Params {
    out: u32, q: u32, k_pool: u32, v_pool: u32, block_table: u32, ctx_len: u32,
    batch: i32, max_ctx: i32, nh: i32, nkv: i32, hd: i32, page: i32, max_pages: i32, num_slots: i32, window: i32, scale: f32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_q: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_k_pool: array<u32>;
@group(0) @binding(4) var<storage, read_write> d_v_pool: array<u32>;
@group(0) @binding(5) var<storage, read_write> d_block_table: array<u32>;
@group(0) @binding(6) var<storage, read_write> d_ctx_len: array<u32>;
@group(0) @binding(7) var<storage, read_write> d_workspace: array<atomic<u32>>;
// The backend's arrival counters (attention_decode_once): one a (sequence,
// query-head group), zero between launches.
@group(0) @binding(8) var<storage, read_write> d_arrivals: array<atomic<u32>>;

fn ws_store(i: u32, v: u32) {
    atomicStore(&d_workspace[i], v);
}

fn ws_load(i: u32) -> u32 {
    return atomicLoad(&d_workspace[i]);
}

//! include "attn/tile_common.wgsli"

// The split rule of kernels/src/attn/mod.rs (decode_splits, visible_keys),
// whose constants a unit test there checks against these.
const DECODE_TARGET_BLOCKS: u32 = 256u;
const MIN_SPLIT_KEYS: u32 = 16u;

fn visible_keys(ctx: u32) -> u32 {
    if (p.window > 0) {
        return min(ctx, u32(p.window));
    }
    return ctx;
}

fn decode_splits(keys: u32) -> u32 {
    let bh = max(1u, u32(p.batch) * u32(p.nkv));
    let want = DECODE_TARGET_BLOCKS / bh + select(0u, 1u, DECODE_TARGET_BLOCKS % bh != 0u);
    let need = keys / MIN_SPLIT_KEYS + select(0u, 1u, keys % MIN_SPLIT_KEYS != 0u);
    return max(1u, min(want, need));
}

// S: the chunk stride of the workspace.
fn planned_splits() -> u32 {
    return decode_splits(visible_keys(u32(max(p.max_ctx, 0))));
}

// The chunks sequence b fills: decode_splits of its visible keys, 1 for an
// invalid ctx_len (whose chunk 0 carries the NaN); the ones past it up to
// the planned S are idle, neither written nor read.
fn active_chunks(b: u32) -> u32 {
    let ctx = bitcast<i32>(d_ctx_len[p.ctx_len + b]);
    if (ctx < 1 || ctx > p.max_ctx || u32(ctx - 1) / u32(p.page) >= u32(p.max_pages)) {
        return 1u;
    }
    var lo = 0u;
    if (p.window > 0) {
        lo = u32(max(ctx - p.window, 0));
    }
    return decode_splits(u32(ctx) - lo);
}

// Word offset of the (m, l) pairs in the workspace.
fn ml_base(splits: u32) -> u32 {
    return u32(p.batch) * u32(p.nh) * splits * u32(p.hd);
}

// Words of each copied matrix an invocation loads before it stores any.
const CP_U: u32 = 8u;

var<workgroup> bad_flag: atomic<u32>;
var<workgroup> bad_u: u32;
// The chunk's key range, made uniform (it comes from ctx_len in storage) so
// that the tile loop may hold barriers.
var<workgroup> range_start: u32;
var<workgroup> range_stop: u32;
// The workgroup's sequence's active_chunks, made uniform.
var<workgroup> active_u: u32;

fn next_pow2(x: u32) -> u32 {
    return select(1u, 1u << (32u - countLeadingZeros(x - 1u)), x > 1u);
}

// Workgroup (chunk, y, sequence) of phase 1: (chunk sp, grid y, sequence b),
// and whether it is one (a folded grid has extra workgroups).
struct Phase1Id {
    sp: u32,
    y: u32,
    b: u32,
    real: bool,
}

fn phase1_id(wid: vec3<u32>, nwg: vec3<u32>) -> Phase1Id {
    let sp = group_x(wid, nwg, p.fold);
    let y = group_y(wid, p.fold);
    // Folding x into z (fold 2) happens only for a batch of one: z is the fold then.
    let b = select(wid.z, 0u, p.fold == 2u);
    return Phase1Id(sp, y, b, sp < p.gx && y < p.gy && b < p.gz);
}

// The query heads of grid row y: the first, and how many (up to x0 = hpw
// of the heads that read KV head y / x1).
fn group_heads(y: u32) -> vec2<u32> {
    let nh = u32(p.nh);
    let group = nh / u32(p.nkv);
    let hpw = p.x0;
    let kvh = y / p.x1;
    let h0 = kvh * group + (y % p.x1) * hpw;
    return vec2<u32>(h0, min(hpw, kvh * group + group - h0));
}

@compute @workgroup_size(128)
fn attention_decode(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
    let id = phase1_id(wid, nwg);
    if (!id.real) {
        return;
    }
    if (id.sp < uniform_active_chunks(id.b, lid)) {
        chunk_partials(id.sp, id.y, id.b, lid);
    }
}

// active_chunks(b), the same for every invocation of the workgroup.
fn uniform_active_chunks(b: u32, lid: u32) -> u32 {
    if (lid == 0u) {
        active_u = active_chunks(b);
    }
    return workgroupUniformLoad(&active_u);
}

//! include "util/arrival.wgsli"

@compute @workgroup_size(128)
fn attention_decode_once(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                         @builtin(local_invocation_index) lid: u32) {
    let id = phase1_id(wid, nwg);
    if (!id.real) {
        return;
    }
    // An idle chunk's workgroup only arrives: the combine reads the active ones.
    if (id.sp < uniform_active_chunks(id.b, lid)) {
        chunk_partials(id.sp, id.y, id.b, lid);
    }
    // The last combines; the pool's tiles are done with (combine_head
    // stages into it behind its own barrier).
    if (last_to_arrive(id.b * p.gy + id.y, p.gx, lid)) {
        let heads = group_heads(id.y);
        for (var r = 0u; r < heads.y; r++) {
            combine_head(id.b, heads.x + r, lid);
        }
    }
}

// Phase 1 of one workgroup: the chunk's partials (o, m, l) of its query heads.
fn chunk_partials(sp: u32, y: u32, b: u32, lid: u32) {
    let nh = u32(p.nh);
    let nkv = u32(p.nkv);
    let kvh = y / p.x1;
    let hpw = p.x0;
    let heads = group_heads(y);
    let h0 = heads.x;
    let m_rows = heads.y;
    let w = u32(p.hd) / 2u;
    let page = u32(p.page);
    let splits = planned_splits();
    let ml_at = ml_base(splits);
    let mp = next_pow2(hpw);
    let kt_max = min(MAX_KT, (POOL - mp * w) / (2u * w + mp));
    let k_off = mp * w;
    let v_off = k_off + kt_max * w;
    let s_off = v_off + kt_max * w;
    // P·V mapping: thread = (row r, lane), each lane up to 8 words of the row.
    let tpr = WG / mp;
    let pr_row = lid / tpr;
    let lane = lid % tpr;

    // The visible keys [lo, end) and their table entries.
    let ctx = bitcast<i32>(d_ctx_len[p.ctx_len + b]);
    let table = p.block_table + b * u32(p.max_pages);
    var lo = 0u;
    var end = 0u;
    if (lid == 0u) {
        atomicStore(&bad_flag, 0u);
    }
    workgroupBarrier();
    if (ctx < 1 || ctx > p.max_ctx || u32(ctx - 1) / page >= u32(p.max_pages)) {
        atomicStore(&bad_flag, 1u);
    } else {
        end = u32(ctx);
        if (p.window > 0) {
            lo = u32(max(ctx - p.window, 0));
        }
        for (var pi = lo / page + lid; pi <= (end - 1u) / page; pi += WG) {
            // The highest slot of this page that the window uses; lower ones are smaller.
            let last = min(end - 1u, pi * page + page - 1u);
            if (!slot_ok(bitcast<i32>(d_block_table[table + pi]), last % page)) {
                atomicStore(&bad_flag, 1u);
            }
        }
    }
    workgroupBarrier();
    if (lid == 0u) {
        bad_u = atomicLoad(&bad_flag);
    }
    let bad = workgroupUniformLoad(&bad_u);
    let hd = u32(p.hd);
    if (bad != 0u) {
        for (var r = 0u; r < m_rows; r++) {
            let e = ((b * nh + h0 + r) * splits + sp);
            for (var d = lid; d < hd; d += WG) {
                ws_store(e * hd + d, F32_NAN);
            }
            if (lid < 2u) {
                ws_store(ml_at + e * 2u + lid, F32_NAN);
            }
        }
        return;
    }

    // This chunk's keys: the sequence's own chunk count; a chunk past it, or
    // starting past the last key, is empty.
    if (lid == 0u) {
        let keys = end - lo;
        let mine = decode_splits(keys);
        let split_len = (keys + mine - 1u) / mine;
        var start = end;
        var stop = end;
        if (sp < mine && sp * split_len < keys) {
            start = lo + sp * split_len;
            stop = min(start + split_len, end);
        }
        range_start = start;
        range_stop = stop;
    }
    let start = workgroupUniformLoad(&range_start);
    let stop = workgroupUniformLoad(&range_stop);

    let qn = m_rows * w;
    let q0 = p.q + (b * nh + h0) * w;
    for (var i0 = lid; i0 < qn; i0 += WG * CP_U) {
        var qb: array<u32, CP_U>;
        for (var u = 0u; u < CP_U; u++) {
            qb[u] = d_q[q0 + min(i0 + u * WG, qn - 1u)];
        }
        for (var u = 0u; u < CP_U; u++) {
            if (i0 + u * WG < qn) {
                smem[i0 + u * WG] = qb[u];
            }
        }
    }
    if (lid < m_rows) {
        row_m[lid] = bitcast<f32>(NEG_INF);
    }
    var l = 0.0;
    var acc: array<f32, 16>;
    for (var i = 0u; i < 16u; i++) {
        acc[i] = 0.0;
    }
    let kw = nkv * w; // words per pool slot

    for (var t0 = start; t0 < stop; t0 += kt_max) {
        let kt = min(kt_max, stop - t0);
        workgroupBarrier();
        if (lid < kt) {
            let key = t0 + lid;
            let pg = bitcast<i32>(d_block_table[table + key / page]);
            slot_of[lid] = u32(pg) * page + key % page;
        }
        workgroupBarrier();
        // Past the tile's last word a load repeats that word (in bounds,
        // from the cache) and its store is skipped.
        let n = kt * w;
        for (var i0 = lid; i0 < n; i0 += WG * CP_U) {
            var kb: array<u32, CP_U>;
            var vb: array<u32, CP_U>;
            for (var u = 0u; u < CP_U; u++) {
                let i = min(i0 + u * WG, n - 1u);
                let j = i / w;
                let at = slot_of[j] * kw + kvh * w + (i - j * w);
                kb[u] = d_k_pool[p.k_pool + at];
                vb[u] = d_v_pool[p.v_pool + at];
            }
            for (var u = 0u; u < CP_U; u++) {
                let i = i0 + u * WG;
                if (i < n) {
                    smem[k_off + i] = kb[u];
                    smem[v_off + i] = vb[u];
                }
            }
        }
        workgroupBarrier();
        // Scores: pair = r · kt + j; tp threads (the most that this tile's
        // pairs leave room for, a power of two) split a dot over strided words.
        let pairs = m_rows * kt;
        let tp = select(1u, 1u << (31u - countLeadingZeros(WG / pairs)), pairs < WG);
        tile_scores(pairs, kt, kt_max, w, tp, k_off, s_off, lid);
        workgroupBarrier();
        if (lid < m_rows) {
            var mt = bitcast<f32>(NEG_INF);
            for (var j = 0u; j < kt; j++) {
                mt = max(mt, bitcast<f32>(smem[s_off + lid * kt_max + j]));
            }
            let m_old = row_m[lid];
            let m_new = max(m_old, mt);
            row_m[lid] = m_new;
            // Every key of a split is visible, so m_new is finite: e^{−inf} = 0 on the first tile.
            row_alpha[lid] = exp(m_old - m_new);
        }
        workgroupBarrier();
        for (var i = lid; i < pairs; i += WG) {
            let r = i / kt;
            let at = s_off + r * kt_max + i % kt;
            smem[at] = bitcast<u32>(exp(bitcast<f32>(smem[at]) - row_m[r]));
        }
        workgroupBarrier();
        if (lid < m_rows) {
            var ls = 0.0;
            for (var j = 0u; j < kt; j++) {
                ls += bitcast<f32>(smem[s_off + lid * kt_max + j]);
            }
            l = l * row_alpha[lid] + ls;
        }
        if (pr_row < m_rows) {
            pv_update(&acc, pr_row, kt, kt_max, w, tpr, lane, v_off, s_off, false);
        }
    }

    if (pr_row < m_rows) {
        let e = (b * nh + h0 + pr_row) * splits + sp;
        for (var i = 0u; i < 8u; i++) {
            let c = lane + i * tpr;
            if (c < w) {
                ws_store(e * hd + 2u * c, bitcast<u32>(acc[2u * i]));
                ws_store(e * hd + 2u * c + 1u, bitcast<u32>(acc[2u * i + 1u]));
            }
        }
    }
    if (lid < m_rows) {
        let e = (b * nh + h0 + lid) * splits + sp;
        ws_store(ml_at + e * 2u, bitcast<u32>(row_m[lid]));
        ws_store(ml_at + e * 2u + 1u, bitcast<u32>(l));
    }
}

fn used(m: f32, l: f32) -> bool {
    return !(bitcast<u32>(m) == NEG_INF || l == 0.0);
}

@compute @workgroup_size(128)
fn attention_decode_reduce(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                           @builtin(local_invocation_index) lid: u32) {
    let b = group_x(wid, nwg, p.fold);
    let h = group_y(wid, p.fold);
    if (b >= p.gx || h >= p.gy || b >= u32(p.batch) || h >= u32(p.nh)) {
        return;
    }
    combine_head(b, h, lid);
}

// (m, l) of chunk s, staged in the pool by combine_head.
fn chunk_m(s: u32) -> f32 {
    return bitcast<f32>(smem[2u * s]);
}

fn chunk_l(s: u32) -> f32 {
    return bitcast<f32>(smem[2u * s + 1u]);
}

// Phase 2 for (sequence b, head h), every invocation of the workgroup
// calling it: the chunks' (m, l) staged in the pool's first 2·S words, then
// the combine into out. Ends with a barrier, so the pool may be staged again.
fn combine_head(b: u32, h: u32, lid: u32) {
    let splits = planned_splits();
    let ml_at = ml_base(splits);
    let hd = u32(p.hd);
    let w = hd / 2u;
    let bh = b * u32(p.nh) + h;
    let o = p.out + bh * w;
    let chunks = active_chunks(b);
    // The sequence's active chunks' (m, l) in one round of loads; then each invocation
    // scans them from workgroup memory.
    for (var s = lid; s < chunks; s += 128u) {
        smem[2u * s] = ws_load(ml_at + 2u * (bh * splits + s));
        smem[2u * s + 1u] = ws_load(ml_at + 2u * (bh * splits + s) + 1u);
    }
    workgroupBarrier();
    var any = false;
    var nan = false;
    var big_m = bitcast<f32>(NEG_INF);
    for (var s = 0u; s < chunks; s++) {
        let m = chunk_m(s);
        if (used(m, chunk_l(s))) {
            any = true;
            nan = nan || is_nan_f32(m);
            big_m = max(big_m, m);
        }
    }
    if (!any || nan) {
        for (var c = lid; c < w; c += 128u) {
            d_out[o + c] = BF16_NAN2;
        }
    } else {
        combine_words(bh, o, w, big_m, chunks, lid);
    }
    // The pool's (m, l) are read: the next head may stage its own.
    workgroupBarrier();
}

// The combine of head bh's output words from the staged (m, l) of its
// first `chunks` chunks (the active ones), whose used chunks' largest m is big_m.
fn combine_words(bh: u32, o: u32, w: u32, big_m: f32, chunks: u32, lid: u32) {
    let splits = planned_splits();
    let hd = u32(p.hd);
    var den = 0.0;
    for (var s = 0u; s < chunks; s++) {
        let m = chunk_m(s);
        let l = chunk_l(s);
        if (used(m, l)) {
            den += exp(m - big_m) * l;
        }
    }
    // Chunk order as above; CP_U chunks' partials are loaded before any is
    // added (a chunk past the last, or unused, loads chunk 0's in bounds and
    // adds nothing: its weight is skipped, as the sum above skips it).
    for (var c = lid; c < w; c += 128u) {
        var a = 0.0;
        var z = 0.0;
        for (var s0 = 0u; s0 < chunks; s0 += CP_U) {
            var oa: array<f32, CP_U>;
            var oz: array<f32, CP_U>;
            for (var u = 0u; u < CP_U; u++) {
                let e = bh * splits + select(0u, s0 + u, s0 + u < chunks);
                oa[u] = bitcast<f32>(ws_load(e * hd + 2u * c));
                oz[u] = bitcast<f32>(ws_load(e * hd + 2u * c + 1u));
            }
            for (var u = 0u; u < CP_U; u++) {
                let s = s0 + u;
                if (s < chunks && used(chunk_m(s), chunk_l(s))) {
                    let f = exp(chunk_m(s) - big_m);
                    a += f * oa[u];
                    z += f * oz[u];
                }
            }
        }
        d_out[o + c] = pack_bf16(a / den, z / den);
    }
}
