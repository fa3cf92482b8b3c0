// out = bf16(table[id] * scale); RPG rows a workgroup (gather_rows.wgsli).
struct Params {
    out: u32, table: u32, ids: u32, rows: i32, h: i32, vocab: i32, scale: f32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
    // The second window's word offset in d_table1 (after the tail: embed/mod.rs).
    w1: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> d_table: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> d_ids: array<u32>;
@group(0) @binding(4) var<storage, read_write> d_table1: array<vec4<u32>>;

//! include "embed/gather_rows.wgsli"

fn row_id(r: u32) -> i32 {
    return bitcast<i32>(d_ids[p.ids + r]);
}

fn src4(i: u32) -> vec4<u32> {
    return d_table[i];
}

fn src4b(i: u32) -> vec4<u32> {
    return d_table1[i];
}

fn map4(v: vec4<u32>) -> vec4<u32> {
    return pack_bf16x4(bf16x4_lo(v) * p.scale, bf16x4_hi(v) * p.scale);
}

fn map1(w: u32) -> u32 {
    return pack_bf16(bf16_lo(w) * p.scale, bf16_hi(w) * p.scale);
}

@compute @workgroup_size(256)
fn embed_gather_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    gather_rows(wid, nwg, lid, p.table, p.vocab);
}
