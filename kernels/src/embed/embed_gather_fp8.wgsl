// out = bf16(bf16(e4m3 * row_scale) * scale). A workgroup of 256 takes RPG
// consecutive output rows (a pipeline override the plan picks, embed/mod.rs),
// as gather_rows.wgsli does and for the same reason: the RPG ids arrive in
// one load, then the loads of row k + 1 (its row scale and up to two
// vec4<u32> of 16 codes an invocation) are issued before row k is converted
// (e4m3x4_exact) and stored (two output vectors a table vector), so a
// workgroup always has a row of loads outstanding. That fast path needs h % 16 == 0, h <= 8192 and
// out, table at word offsets that are multiples of 4; other shapes copy their
// rows one at a time, a word (two bf16) at a time.
// A pass sees table rows [x0, x0 + x1) (table at row x0 of its window; the
// split plan of tables past one binding runs several), row_scale whole;
// the pass with x2 = 1 writes the NaN rows.
struct Params {
    out: u32, table: u32, row_scale: u32, ids: u32, rows: i32, h: i32, vocab: i32, scale: f32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> d_table: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> d_row_scale: array<u32>;
@group(0) @binding(4) var<storage, read_write> d_ids: array<u32>;

const WG: u32 = 256u;
// Output rows per workgroup, 1..=MAX_RPG.
override RPG: u32 = 1u;
const MAX_RPG: u32 = 16u;
// What a pass does with a row (row_action): dequantise table row `local` (< NAN_ROW), or:
const SKIP_ROW: u32 = 0xffffffffu;
const NAN_ROW: u32 = 0xfffffffeu;

var<workgroup> g_ids: array<i32, MAX_RPG>;

fn row_action(id: i32) -> u32 {
    if (id >= 0 && id < p.vocab) {
        // Table row of id within this pass's window (wraps past it when below x0).
        let local = u32(id) - p.x0;
        return select(SKIP_ROW, local, local < p.x1);
    }
    return select(SKIP_ROW, NAN_ROW, p.x2 != 0u);
}

// Two output words from the low (sh = 0) or high (sh = 16) half of a table word.
fn dq2(w: u32, sh: u32, s: f32) -> u32 {
    let c = w >> sh;
    let a = bf16_round(e4m3(c & 0xffu) * s) * p.scale;
    let b = bf16_round(e4m3((c >> 8u) & 0xffu) * s) * p.scale;
    return pack_bf16(a, b);
}

fn ld(t: u32, j: u32, n: u32) -> vec4<u32> {
    if (j < n) {
        return d_table[t + j];
    }
    return vec4<u32>(0u);
}

// e4m3() of the 4 codes of w, lowest byte first, bit for bit, without its
// int-to-float conversion (a quarter-rate instruction on NVIDIA GPUs, one a
// code): exponent and mantissa go to bits 20..26 with 120 added to the
// exponent, 2^(e-7)·(1 + m/8) for e > 0; for e = 0 that reads 2^-7·(1 + m/8)
// where the code means 2^-6·m/8 = 2v - 2^-6 (one exact fma, +0 for m = 0).
fn e4m3x4_exact(w: u32) -> vec4<f32> {
    let em = vec4<u32>(w << 20u, w << 12u, w << 4u, w >> 4u) & vec4<u32>(0x07f00000u);
    let sign = vec4<u32>(w << 24u, w << 16u, w << 8u, w) & vec4<u32>(0x80000000u);
    let v = bitcast<vec4<f32>>(em + vec4<u32>(120u << 23u));
    var r = select(v, fma(v, vec4<f32>(2.0), vec4<f32>(-0.015625)), v < vec4<f32>(0.015625));
    r = select(r, vec4<f32>(bitcast<f32>(F32_NAN)), em == vec4<u32>(0x07f00000u));
    return bitcast<vec4<f32>>(bitcast<vec4<u32>>(r) | sign);
}

// The four output bf16 of a table word (dq2 of both halves), two words.
fn dq4(w: u32, s: f32) -> vec2<u32> {
    let b = bf16_bits4(bf16_round4(e4m3x4_exact(w) * s) * p.scale);
    return vec2<u32>((b.x & 0xffffu) | (b.y << 16u), (b.z & 0xffffu) | (b.w << 16u));
}

// Table vector j (16 codes) -> output vectors 2j, 2j + 1.
fn st(o: u32, j: u32, n: u32, v: vec4<u32>, s: f32) {
    if (j < n) {
        d_out[o + 2u * j] = vec4<u32>(dq4(v.x, s), dq4(v.y, s));
        d_out[o + 2u * j + 1u] = vec4<u32>(dq4(v.z, s), dq4(v.w, s));
    }
}

// An invocation's share of one row on the fast path: table vectors lid, lid + WG.
struct Slots {
    v0: vec4<u32>,
    v1: vec4<u32>,
    s: f32,
}

fn load_row(act: u32, t0: u32, n: u32, lid: u32) -> Slots {
    var s = Slots(vec4<u32>(0u), vec4<u32>(0u), 0.0);
    if (act < NAN_ROW) {
        let t = t0 + act * n;
        s.v0 = ld(t, lid, n);
        s.v1 = ld(t, lid + WG, n);
        s.s = bitcast<f32>(d_row_scale[p.row_scale + act + p.x0]);
    }
    return s;
}

fn store_row(act: u32, o: u32, n: u32, lid: u32, s: Slots) {
    if (act == NAN_ROW) {
        for (var j = lid; j < 2u * n; j += WG) {
            d_out[o + j] = vec4<u32>(BF16_NAN2);
        }
    } else if (act != SKIP_ROW) {
        st(o, lid, n, s.v0, s.s);
        st(o, lid + WG, n, s.v1, s.s);
    }
}

// One row of any shape, a word at a time.
fn copy_row(act: u32, r: u32, h: u32, lid: u32) {
    if (act == SKIP_ROW) {
        return;
    }
    let valid = act != NAN_ROW;
    let hw = h / 2u;
    let o = p.out + r * hw;
    var s = 0.0;
    if (valid) {
        s = bitcast<f32>(d_row_scale[p.row_scale + act + p.x0]);
    }
    let t = p.table + select(0u, act, valid) * (h / 4u);
    for (var j = lid; j < hw; j += WG) {
        var v = BF16_NAN2;
        if (valid) {
            let ti = t + j / 2u;
            v = dq2(d_table[ti >> 2u][ti & 3u], (j & 1u) * 16u, s);
        }
        d_out[(o + j) >> 2u][(o + j) & 3u] = v;
    }
}

// The workgroup's first output row and its row count (0 past the grid or
// the rows; uniform across the workgroup, so its early return keeps the
// barriers after it in uniform control flow).
fn group_span(wid: vec3<u32>, nwg: vec3<u32>) -> vec2<u32> {
    let g = group_x(wid, nwg, p.fold);
    let rows = u32(p.rows);
    let r0 = g * RPG;
    if (g >= p.gx || r0 >= rows) {
        return vec2<u32>(0u);
    }
    return vec2<u32>(r0, min(RPG, rows - r0));
}

@compute @workgroup_size(256)
fn embed_gather_fp8(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
    let span = group_span(wid, nwg);
    let r0 = span.x;
    let cnt = span.y;
    if (cnt == 0u) {
        return;
    }
    if (lid < cnt) {
        g_ids[lid] = bitcast<i32>(d_ids[p.ids + r0 + lid]);
    }
    workgroupBarrier();
    let h = u32(p.h);
    if (h % 16u == 0u && h <= 32u * WG && aligned4(p.out, p.table, NONE, NONE)) {
        let n = h / 16u;
        let t0 = p.table / 4u;
        var act = row_action(g_ids[0]);
        var cur = load_row(act, t0, n, lid);
        for (var k = 0u; k < cnt; k++) {
            var nact = SKIP_ROW;
            if (k + 1u < cnt) {
                nact = row_action(g_ids[k + 1u]);
            }
            let nxt = load_row(nact, t0, n, lid);
            store_row(act, p.out / 4u + (r0 + k) * 2u * n, n, lid, cur);
            act = nact;
            cur = nxt;
        }
        return;
    }
    for (var k = 0u; k < cnt; k++) {
        copy_row(row_action(g_ids[k]), r0 + k, h, lid);
    }
}

// ---- embed_gather_fp8_lut, the plan's entry where its fast path applies
// (embed/mod.rs; SWITCHYARD_WGSL_FP8_EMBED=row keeps embed_gather_fp8 above
// for an A/B). ----
//
// The workgroup's RPG rows as one run of units (16 codes = one table vector
// -> two output vectors), unit u = row u / n, vector u % n, taken by
// invocation u % WG in chunks of four named slots (4 * WG units), so a row
// of 336 vectors costs 672 / 1024 of a chunk at RPG 2 instead of two rounds
// of 256 of which the second is 31% full. All four slots' loads are issued
// before anything is stored. The per-code decode above (~35 ALU
// instructions a code: rebuild, two bf16 roundings with their NaN checks,
// pack) was the limit (0.0394 ms on the H200 with every row in L2). A row
// has one scale, so its 256 possible outputs are precomputed once (one code
// an invocation, same expression as dq2, so the bits are embed_gather_fp8's)
// into workgroup memory; a code then costs a byte extract and a shared load,
// a pair one merge. NaN rows get a table of NaN and read code 0, so they need
// no path of their own. H200, eighth session: 0.0345 / 0.0348 ms against
// 0.0442 / 0.0437 for embed_gather_fp8; the same layout with the per-code
// decode ran 0.0508 / 0.0512 and 8-code units 0.0932 / 0.0303 (both removed).
// Rows a LUT workgroup holds tables for (the plan keeps RPG at most this).
const LUT_ROWS: u32 = 8u;

var<workgroup> g_act: array<u32, MAX_RPG>;
var<workgroup> g_lut: array<array<u32, 256>, LUT_ROWS>;

// Unit u of the workgroup: its row r (within the group), the table vector
// within the pass's window, and the row's action (SKIP_ROW past the end).
// Its output is vector u (8 codes) or 2u, 2u + 1 (16) from the group's first
// output row; the stores recompute that from u rather than hold it.
struct Unit {
    r: u32,
    t: u32,
    act: u32,
}

fn unit_at(u: u32, n: u32, units: u32) -> Unit {
    if (u >= units) {
        return Unit(0u, 0u, SKIP_ROW);
    }
    let r = u / n;
    let act = g_act[r];
    return Unit(r, select(0u, act, act < NAN_ROW) * n + (u - r * n), act);
}

struct Slot {
    x: Unit,
    v: vec4<u32>,
}

fn ld_slot(u: u32, n: u32, units: u32, t0: u32) -> Slot {
    let x = unit_at(u, n, units);
    var sl = Slot(x, vec4<u32>(0u));
    if (x.act < NAN_ROW) {
        sl.v = d_table[t0 + x.t];
    }
    return sl;
}

// Output bf16 pair of the codes in bytes 0, 1 (lo) and 2, 3 (hi) of w.
fn lut4(r: u32, w: u32) -> vec2<u32> {
    let lo = g_lut[r][w & 0xffu] | (g_lut[r][(w >> 8u) & 0xffu] << 16u);
    let hi = g_lut[r][(w >> 16u) & 0xffu] | (g_lut[r][w >> 24u] << 16u);
    return vec2<u32>(lo, hi);
}

// o: the unit's first output vector.
fn st_slot(sl: Slot, o: u32) {
    let x = sl.x;
    if (x.act == SKIP_ROW) {
        return;
    }
    d_out[o] = vec4<u32>(lut4(x.r, sl.v.x), lut4(x.r, sl.v.y));
    d_out[o + 1u] = vec4<u32>(lut4(x.r, sl.v.z), lut4(x.r, sl.v.w));
}

// Entry c of row r's table: code c of that row, rounded as dq2 rounds it.
fn build_lut(cnt: u32, lid: u32) {
    let e = e4m3(lid);
    for (var r = 0u; r < cnt; r++) {
        let act = g_act[r];
        var v = BF16_NAN;
        if (act < NAN_ROW) {
            let s = bitcast<f32>(d_row_scale[p.row_scale + act + p.x0]);
            v = bf16_bits(bf16_round(e * s) * p.scale);
        }
        g_lut[r][lid] = v;
    }
}

@compute @workgroup_size(256)
fn embed_gather_fp8_lut(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                        @builtin(local_invocation_index) lid: u32) {
    let span = group_span(wid, nwg);
    let r0 = span.x;
    let cnt = span.y;
    if (cnt == 0u) {
        return;
    }
    if (lid < cnt) {
        g_act[lid] = row_action(bitcast<i32>(d_ids[p.ids + r0 + lid]));
    }
    workgroupBarrier();
    let h = u32(p.h);
    if (h % 16u != 0u || !aligned4(p.out, p.table, NONE, NONE)) {
        for (var k = 0u; k < cnt; k++) {
            copy_row(g_act[k], r0 + k, h, lid);
        }
        return;
    }
    let n = h / 16u;
    let units = cnt * n;
    let t0 = p.table / 4u;
    let o0 = p.out / 4u + r0 * 2u * n;
    var base = 0u;
    var s0 = ld_slot(lid, n, units, t0);
    var s1 = ld_slot(lid + WG, n, units, t0);
    var s2 = ld_slot(lid + 2u * WG, n, units, t0);
    var s3 = ld_slot(lid + 3u * WG, n, units, t0);
    build_lut(cnt, lid);
    workgroupBarrier();
    loop {
        st_slot(s0, o0 + 2u * (base + lid));
        st_slot(s1, o0 + 2u * (base + lid + WG));
        st_slot(s2, o0 + 2u * (base + lid + 2u * WG));
        st_slot(s3, o0 + 2u * (base + lid + 3u * WG));
        base += 4u * WG;
        if (base >= units) {
            break;
        }
        s0 = ld_slot(base + lid, n, units, t0);
        s1 = ld_slot(base + lid + WG, n, units, t0);
        s2 = ld_slot(base + lid + 2u * WG, n, units, t0);
        s3 = ld_slot(base + lid + 3u * WG, n, units, t0);
    }
}
