// Byte-granular copy or zero for ranges whose offsets or lengths are not
// multiples of 4 (storage buffers move whole u32 words). A thread owns one
// destination word and rewrites only the bytes inside the range, so the
// bytes around it keep their values. Offsets are bytes within the bound
// windows; x0 = 1 zeroes instead of copying.
struct Params {
    dst: u32, src: u32, n: u32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_dst: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_src: array<u32>;

@compute @workgroup_size(256)
fn bytecopy(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let w = p.dst / 4u + group_x(wid, nwg, p.fold) * 256u + lid;
    let end = p.dst + p.n;
    if (w * 4u >= end) {
        return;
    }
    var v = d_dst[w];
    for (var b = 0u; b < 4u; b++) {
        let a = w * 4u + b;
        if (a >= p.dst && a < end) {
            var byte = 0u;
            if (p.x0 == 0u) {
                let s = a - p.dst + p.src;
                byte = (d_src[s / 4u] >> ((s % 4u) * 8u)) & 0xffu;
            }
            v = (v & ~(0xffu << (b * 8u))) | (byte << (b * 8u));
        }
    }
    d_dst[w] = v;
}
