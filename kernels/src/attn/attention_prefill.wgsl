// Causal (optionally sliding) paged attention for query rows of any mix of
// sequences. A workgroup owns x0 = RB consecutive rows (a power of two with
// RB · hd/2 ≤ 1024; the plan in attn/mod.rs sizes the grid) and one query head.
//
// Rows of one workgroup usually belong to one sequence; when they do not,
// the workgroup runs one pass per sequence present, each over the union of
// its rows' key ranges, the other rows masked out. A pass walks its keys in
// tiles of KT: slots looked up once per key, K and V rows copied into
// workgroup memory (consecutive threads on consecutive words), scores for
// every (row, key) pair with the causal / window mask, the online-softmax
// update per row (running max m, rescale alpha), and P·V with each thread
// holding a slice of its row's f32 accumulator in registers.
//
// Workgroup memory is tile_common.wgsli's pool (under the portable 16 KiB),
// with M = RB query rows.
//
// A row whose sequence or position is out of range, or whose visible keys
// hit an invalid page or slot, is stored as bf16 NaN.
struct Params {
    out: u32, q: u32, k_pool: u32, v_pool: u32, block_table: u32, seq_of_row: u32, pos: u32,
    rows: i32, nh: i32, nkv: i32, hd: i32, page: i32, max_pages: i32, num_seqs: i32, num_slots: i32, window: i32, scale: f32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_q: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_k_pool: array<u32>;
@group(0) @binding(4) var<storage, read_write> d_v_pool: array<u32>;
@group(0) @binding(5) var<storage, read_write> d_block_table: array<u32>;
@group(0) @binding(6) var<storage, read_write> d_seq_of_row: array<u32>;
@group(0) @binding(7) var<storage, read_write> d_pos: array<u32>;

//! include "attn/tile_common.wgsli"

// Row states.
const PENDING: u32 = 0u;
const ACTIVE: u32 = 1u;
const FINISHED: u32 = 2u;
const INVALID: u32 = 3u;

var<workgroup> row_l: array<f32, MAX_M>;
var<workgroup> row_seq: array<i32, MAX_M>;
var<workgroup> row_pos: array<u32, MAX_M>;
var<workgroup> row_lo: array<u32, MAX_M>;
var<workgroup> row_state: array<u32, MAX_M>;
var<workgroup> row_bad: array<atomic<u32>, MAX_M>;
// The current pass (sequence, first key, key count), made uniform for the loops.
var<workgroup> pass_seq: i32;
var<workgroup> pass_lo: u32;
var<workgroup> pass_n: u32;

@compute @workgroup_size(128)
fn attention_prefill(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let rb = group_x(wid, nwg, p.fold);
    let h = group_y(wid, p.fold);
    if (rb >= p.gx || h >= p.gy) {
        return;
    }
    let rows = u32(p.rows);
    let nh = u32(p.nh);
    let kvh = h / (nh / u32(p.nkv));
    let w = u32(p.hd) / 2u;
    let page = u32(p.page);
    let mp = p.x0;
    let row0 = rb * mp;
    let kt_max = min(MAX_KT, (POOL - mp * w) / (2u * w + mp));
    let k_off = mp * w;
    let v_off = k_off + kt_max * w;
    let s_off = v_off + kt_max * w;
    let pairs_max = mp * kt_max;
    let tp = select(1u, 1u << (31u - countLeadingZeros(WG / pairs_max)), pairs_max < WG);
    let tpr = WG / mp;
    let pr_row = lid / tpr;
    let lane = lid % tpr;
    let width = nh * w; // words per q / out row

    if (lid < mp) {
        let r = row0 + lid;
        var state = INVALID;
        if (r < rows) {
            let seq = bitcast<i32>(d_seq_of_row[p.seq_of_row + r]);
            let pos = bitcast<i32>(d_pos[p.pos + r]);
            if (seq >= 0 && seq < p.num_seqs && pos >= 0 && u32(pos) / page < u32(p.max_pages)) {
                state = PENDING;
                row_seq[lid] = seq;
                row_pos[lid] = u32(pos);
                row_lo[lid] = select(0u, u32(max(pos + 1 - p.window, 0)), p.window > 0);
            }
        }
        row_state[lid] = state;
        atomicStore(&row_bad[lid], 0u);
        row_m[lid] = bitcast<f32>(NEG_INF);
    }
    for (var i = lid; i < mp * w; i += WG) {
        let r = row0 + i / w;
        smem[i] = select(0u, d_q[p.q + r * width + h * w + i % w], r < rows);
    }
    var l = 0.0;
    var acc: array<f32, 16>;
    for (var i = 0u; i < 16u; i++) {
        acc[i] = 0.0;
    }

    loop {
        workgroupBarrier();
        if (lid == 0u) {
            // The sequence of the first pending row; its rows become active.
            var seq = -1;
            var klo = 0xffffffffu;
            var khi = 0u;
            for (var r = 0u; r < mp; r++) {
                if (row_state[r] == ACTIVE) {
                    row_state[r] = FINISHED;
                }
                if (row_state[r] == PENDING && (seq < 0 || row_seq[r] == seq)) {
                    seq = row_seq[r];
                    row_state[r] = ACTIVE;
                    klo = min(klo, row_lo[r]);
                    khi = max(khi, row_pos[r]);
                }
            }
            pass_seq = seq;
            pass_lo = klo;
            pass_n = select(0u, khi + 1u - klo, seq >= 0);
        }
        let seq = workgroupUniformLoad(&pass_seq);
        if (seq < 0) {
            break;
        }
        let klo = workgroupUniformLoad(&pass_lo);
        let kn = workgroupUniformLoad(&pass_n);
        let table = p.block_table + u32(seq) * u32(p.max_pages);
        for (var t = 0u; t < kn; t += kt_max) {
            let t0 = klo + t;
            let kt = min(kt_max, kn - t);
            workgroupBarrier();
            if (lid < kt) {
                let key = t0 + lid;
                let pg = bitcast<i32>(d_block_table[table + key / page]);
                slot_of[lid] = select(NONE, u32(pg) * page + key % page, slot_ok(pg, key % page));
            }
            workgroupBarrier();
            let kw = u32(p.nkv) * w;
            for (var i = lid; i < kt * w; i += WG) {
                let j = i / w;
                let slot = slot_of[j];
                var kv = 0u;
                var vv = 0u;
                if (slot != NONE) {
                    let at = slot * kw + kvh * w + (i - j * w);
                    kv = d_k_pool[p.k_pool + at];
                    vv = d_v_pool[p.v_pool + at];
                }
                smem[k_off + i] = kv;
                smem[v_off + i] = vv;
            }
            workgroupBarrier();
            let pairs = mp * kt;
            tile_scores(pairs, kt, kt_max, w, tp, k_off, s_off, lid);
            workgroupBarrier();
            // Mask, then the running max per row. A key the row can see whose
            // slot is invalid marks the row NaN.
            if (lid < mp) {
                var mt = bitcast<f32>(NEG_INF);
                let in_pass = row_state[lid] == ACTIVE;
                for (var j = 0u; j < kt; j++) {
                    let key = t0 + j;
                    let at = s_off + lid * kt_max + j;
                    let seen = in_pass && key >= row_lo[lid] && key <= row_pos[lid];
                    if (seen && slot_of[j] == NONE) {
                        atomicStore(&row_bad[lid], 1u);
                    }
                    if (seen) {
                        mt = max(mt, bitcast<f32>(smem[at]));
                    } else {
                        smem[at] = NEG_INF;
                    }
                }
                let m_old = row_m[lid];
                let m_new = max(m_old, mt);
                row_m[lid] = m_new;
                // Nothing seen yet: keep alpha = 1 rather than e^{−inf + inf} = NaN.
                row_alpha[lid] = select(exp(m_old - m_new), 1.0, bitcast<u32>(m_new) == NEG_INF);
            }
            workgroupBarrier();
            for (var i = lid; i < pairs; i += WG) {
                let r = i / kt;
                let at = s_off + r * kt_max + i % kt;
                let s = smem[at];
                smem[at] = select(bitcast<u32>(exp(bitcast<f32>(s) - row_m[r])), 0u, s == NEG_INF);
            }
            workgroupBarrier();
            if (lid < mp) {
                var ls = 0.0;
                for (var j = 0u; j < kt; j++) {
                    ls += bitcast<f32>(smem[s_off + lid * kt_max + j]);
                }
                l = l * row_alpha[lid] + ls;
            }
            pv_update(&acc, pr_row, kt, kt_max, w, tpr, lane, v_off, s_off, true);
        }
    }

    if (lid < mp) {
        row_l[lid] = l;
    }
    workgroupBarrier();
    let r = row0 + pr_row;
    if (r >= rows) {
        return;
    }
    let o = p.out + r * width + h * w;
    let nan = row_state[pr_row] == INVALID || atomicLoad(&row_bad[pr_row]) != 0u;
    let l_row = row_l[pr_row];
    for (var i = 0u; i < 8u; i++) {
        let c = lane + i * tpr;
        if (c < w) {
            d_out[o + c] = select(pack_bf16(acc[2u * i] / l_row, acc[2u * i + 1u] / l_row), BF16_NAN2, nan);
        }
    }
}
