// One workgroup of 256 per output row; a bit-exact copy. When h % 8 == 0 and
// out, src sit at word offsets that are multiples of 4, the row moves as
// vec4<u32> with four independent 16-byte loads per invocation issued
// before their stores (64 bytes in flight per invocation); otherwise word
// by word.
struct Params {
    out: u32, src: u32, idx: u32, h: i32, n_src: i32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> d_src: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> d_idx: array<u32>;

const WG: u32 = 256u;

fn ld(s: u32, j: u32, n: u32) -> vec4<u32> {
    if (j < n) {
        return d_src[s + j];
    }
    return vec4<u32>(0u);
}

fn st(o: u32, j: u32, n: u32, v: vec4<u32>) {
    if (j < n) {
        d_out[o + j] = v;
    }
}

@compute @workgroup_size(256)
fn gather_rows_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
    let r = group_x(wid, nwg, p.fold);
    if (r >= p.gx) {
        return;
    }
    let h = u32(p.h);
    let id = bitcast<i32>(d_idx[p.idx + r]);
    let valid = id >= 0 && id < p.n_src;
    if (h % 8u == 0u && aligned4(p.out, p.src, NONE, NONE)) {
        let n = h / 8u;
        let o = p.out / 4u + r * n;
        if (!valid) {
            for (var j = lid; j < n; j += WG) {
                d_out[o + j] = vec4<u32>(BF16_NAN2);
            }
            return;
        }
        let s = p.src / 4u + u32(id) * n;
        for (var j = lid; j < n; j += 4u * WG) {
            let a = ld(s, j, n);
            let b = ld(s, j + WG, n);
            let c = ld(s, j + 2u * WG, n);
            let d = ld(s, j + 3u * WG, n);
            st(o, j, n, a);
            st(o, j + WG, n, b);
            st(o, j + 2u * WG, n, c);
            st(o, j + 3u * WG, n, d);
        }
        return;
    }
    let hw = h / 2u;
    let o = p.out + r * hw;
    let s = p.src + select(0u, u32(id), valid) * hw;
    for (var j = lid; j < hw; j += WG) {
        var v = BF16_NAN2;
        if (valid) {
            v = d_src[(s + j) >> 2u][(s + j) & 3u];
        }
        d_out[(o + j) >> 2u][(o + j) & 3u] = v;
    }
}
