// One workgroup per hidden row; per label a strided dot product and a
// workgroup reduction. Out-of-range labels give NaN. A pass sees table rows
// [x0, x0 + x1) (e8 at row x0 of its window, row_scale whole) and writes the
// labels that fall there; the pass with x2 = 1 writes the NaNs. The plain
// plan is one pass over the whole table; the split plan (tables past one
// storage binding) one per window.
struct Params {
    out: u32, hidden: u32, e8: u32, row_scale: u32, label_ids: u32, rows: i32, n_labels: i32, hdim: i32, vocab: i32, softcap: f32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_hidden: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_e8: array<u32>;
@group(0) @binding(4) var<storage, read_write> d_row_scale: array<u32>;
@group(0) @binding(5) var<storage, read_write> d_label_ids: array<u32>;

@compute @workgroup_size(256)
fn letter_logits_fp8(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let r = group_x(wid, nwg, p.fold);
    if (r >= p.gx || r >= u32(p.rows)) {
        return;
    }
    let hdim = u32(p.hdim);
    let hrow = p.hidden + r * (hdim / 2u);
    for (var j = 0u; j < u32(p.n_labels); j++) {
        let l = bitcast<i32>(d_label_ids[p.label_ids + j]);
        let ok = l >= 0 && l < p.vocab;
        let local = u32(l) - p.x0;
        let mine = ok && local < p.x1;
        var part = 0.0;
        if (mine) {
            let trow = p.e8 + local * (hdim / 4u);
            for (var c = lid; c < hdim / 4u; c += 256u) {
                let w = d_e8[trow + c];
                let a = d_hidden[hrow + 2u * c];
                let b = d_hidden[hrow + 2u * c + 1u];
                let t = vec4<f32>(e4m3(w & 0xffu), e4m3((w >> 8u) & 0xffu), e4m3((w >> 16u) & 0xffu), e4m3(w >> 24u));
                part += dot(t, vec4<f32>(bf16_lo(a), bf16_hi(a), bf16_lo(b), bf16_hi(b)));
            }
        }
        let tot = wg_sum256(part, lid);
        if (lid == 0u && (mine || (!ok && p.x2 != 0u))) {
            var o = F32_NAN;
            if (ok) {
                o = bitcast<u32>(softcap(bitcast<f32>(d_row_scale[p.row_scale + u32(l)]) * tot, p.softcap));
            }
            d_out[p.out + r * u32(p.n_labels) + j] = o;
        }
    }
}
