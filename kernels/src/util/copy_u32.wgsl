// A plain word copy: the bandwidth yardstick for wgpu kernels, so it should
// be as fast as a WGSL copy can be (a slow yardstick flatters every ratio).
// The plan gives each 256-invocation workgroup 4096 words. When both word
// offsets are multiples of 4, each invocation moves four vec4<u32> (64
// bytes): the four 16-byte loads are issued before any store, so every
// invocation keeps 64 bytes in flight, and consecutive invocations touch
// consecutive vectors (each access of the workgroup is coalesced). Otherwise
// the same span moves word by word.
struct Params {
    out: u32, inp: u32, n: u32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> d_inp: array<vec4<u32>>;

const WG: u32 = 256u;
// Words per workgroup (util/mod.rs: WGSL_COPY_WORDS_PER_GROUP).
const SPAN: u32 = 4096u;

@compute @workgroup_size(256)
fn copy_u32(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let b = group_x(wid, nwg, p.fold);
    if (b >= p.gx) {
        return;
    }
    let w0 = b * SPAN;
    if (aligned4(p.out, p.inp, NONE, NONE) && w0 + SPAN <= p.n) {
        // Whole span, aligned: straight-line loads, then stores.
        let o = p.out / 4u + w0 / 4u + lid;
        let i = p.inp / 4u + w0 / 4u + lid;
        let a = d_inp[i];
        let c = d_inp[i + WG];
        let e = d_inp[i + 2u * WG];
        let f = d_inp[i + 3u * WG];
        d_out[o] = a;
        d_out[o + WG] = c;
        d_out[o + 2u * WG] = e;
        d_out[o + 3u * WG] = f;
        return;
    }
    // The last partial span, or misaligned offsets: one word at a time.
    for (var t = lid; t < SPAN; t += WG) {
        let k = w0 + t;
        if (k < p.n) {
            let s = p.inp + k;
            let d = p.out + k;
            d_out[d >> 2u][d & 3u] = d_inp[s >> 2u][s & 3u];
        }
    }
}
