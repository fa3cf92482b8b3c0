// One workgroup of 256 per output row: out = bf16(bf16(e4m3 * row_scale) *
// scale). When h % 16 == 0 and out, table sit at word offsets that are
// multiples of 4, an invocation reads a vec4<u32> of 16 codes and writes the
// two vec4<u32> (16 bf16) they become, two table vectors per burst (both
// loads issued before the stores); otherwise a word (two bf16) at a time.
// A pass sees table rows [x0, x0 + x1) (table at row x0 of its window; the
// split plan of tables past one binding runs several), row_scale whole;
// the pass with x2 = 1 writes the NaN rows (gather_rows.wgsli).
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

// Table vector j (16 codes) -> output vectors 2j, 2j + 1.
fn st(o: u32, j: u32, n: u32, v: vec4<u32>, s: f32) {
    if (j < n) {
        d_out[o + 2u * j] = vec4<u32>(dq2(v.x, 0u, s), dq2(v.x, 16u, s), dq2(v.y, 0u, s), dq2(v.y, 16u, s));
        d_out[o + 2u * j + 1u] = vec4<u32>(dq2(v.z, 0u, s), dq2(v.z, 16u, s), dq2(v.w, 0u, s), dq2(v.w, 16u, s));
    }
}

@compute @workgroup_size(256)
fn embed_gather_fp8(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
    let r = group_x(wid, nwg, p.fold);
    if (r >= p.gx || r >= u32(p.rows)) {
        return;
    }
    let h = u32(p.h);
    let id = bitcast<i32>(d_ids[p.ids + r]);
    let valid = id >= 0 && id < p.vocab;
    let local = u32(id) - p.x0;
    if ((valid && local >= p.x1) || (!valid && p.x2 == 0u)) {
        return;
    }
    if (h % 16u == 0u && aligned4(p.out, p.table, NONE, NONE)) {
        let n = h / 16u;
        let o = p.out / 4u + r * 2u * n;
        if (!valid) {
            for (var j = lid; j < 2u * n; j += WG) {
                d_out[o + j] = vec4<u32>(BF16_NAN2);
            }
            return;
        }
        let s = bitcast<f32>(d_row_scale[p.row_scale + u32(id)]);
        let t = p.table / 4u + local * n;
        for (var j = lid; j < n; j += 2u * WG) {
            let a = ld(t, j, n);
            let b = ld(t, j + WG, n);
            st(o, j, n, a, s);
            st(o, j + WG, n, b, s);
        }
        return;
    }
    let hw = h / 2u;
    let o = p.out + r * hw;
    var s = 0.0;
    if (valid) {
        s = bitcast<f32>(d_row_scale[p.row_scale + u32(id)]);
    }
    let t = p.table + select(0u, local, valid) * (h / 4u);
    for (var j = lid; j < hw; j += WG) {
        var v = BF16_NAN2;
        if (valid) {
            let ti = t + j / 2u;
            v = dq2(d_table[ti >> 2u][ti & 3u], (j & 1u) * 16u, s);
        }
        d_out[(o + j) >> 2u][(o + j) & 3u] = v;
    }
}
