//! One decoder layer: attention block (over its own KV, or over its KV
//! source's on a KV-shared layer), dense MLP, the optional MoE branch, the
//! optional per-layer-input branch, and the layer output (norm, residual,
//! `layer_scalar`).
use super::{linear, Pass, Session};
use crate::error::{Error, Result};
use switchyard_core::Region;
use switchyard_kernels::attn::{AttnDecode, AttnParams};
use switchyard_kernels::gemv::{LayerOutRow, SandwichRow};
use switchyard_kernels::rope_kv::QkvPrep;

impl Session<'_> {
    /// Layer `i` over `rows` rows; the stream moves from `x[cur]` to `x[1 - cur]`.
    pub(super) fn layer(&mut self, i: usize, rows: usize, pass: Pass) -> Result<()> {
        let m = self.model;
        let (ops, cfg, w) = (&m.ops, &m.cfg, &m.weights.layers[i]);
        // Heads, KV heads and MLP width of this model, or of this rank's shard.
        let spec = m.shape().layers[i];
        let (h, nh, hd, nkv, eps) = (cfg.hidden_size, m.shape().num_heads, spec.head_dim, spec.num_kv_heads, cfg.eps);
        let s = &self.s;
        let (xr, x_next) = (s.x[self.cur].region(), s.x[1 - self.cur].region());

        // Attention: input norm, projections (V = K's projection when k_eq_v);
        // at batch 1 the norm runs in the projection's prologue and `xn`,
        // which nothing else reads, is not written.
        let pending = self.pending_out.take();
        let norm = linear::InputNorm { x: xr, w: w.input_norm.region(), xn: s.xn.region(), dim: h, eps, pending };
        // A KV-shared layer projects only q and attends over its source's
        // pool, which the source wrote earlier in this pass.
        let kv = self.cache.view(i);
        let cos_sin = self.rope.get(spec.kind, hd).ok_or_else(|| Error::Request(format!("no RoPE table for layer {i}")))?;
        let common = QkvPrep {
            q_out: s.q.region(),
            k_pool: None,
            v_pool: None,
            q_raw: s.qkv_raw.region(),
            k_raw: None,
            v_raw: None,
            q_norm: Some(w.q_norm.region()),
            k_norm: None,
            cos_sin,
            pos: s.pos.region(),
            slot: None,
            pmap: None,
            rows,
            src_rows: rows,
            nh,
            nkv: 0,
            hd,
            max_pos: self.rope.max_pos,
            num_slots: kv.num_slots,
            eps,
        };
        if spec.kv_source.is_some() {
            let q_raw = linear::normed_query(ops, &w.qkv, &norm, s.qkv_raw.region(), rows)?;
            // q norm and RoPE only (nkv = 0: no KV written).
            ops.qkv_prep_bf16(&QkvPrep { q_raw, ..common })?;
        } else {
            let k_norm = w.k_norm.as_ref().ok_or_else(|| Error::Request(format!("layer {i} owns KV but has no k_norm")))?;
            // q/k norms with weights, v norm without, RoPE on q and k, K and V into the pool.
            let prep = QkvPrep {
                k_pool: Some(kv.k_pool),
                v_pool: Some(kv.v_pool),
                k_norm: Some(k_norm.region()),
                slot: Some(s.slot.region()),
                nkv,
                ..common
            };
            linear::normed_attention_prep(ops, &w.qkv, &norm, s.qkv_raw.region(), rows, s.gu.region(), &prep)?;
        }
        // Gemma 4 scales scores by 1.0 (the q/k norms do the job of 1/sqrt(d)).
        let params = AttnParams { nh, window: spec.window, scale: 1.0 };
        match pass {
            Pass::Prefill => {
                ops.attention_prefill(s.attn.region(), s.q.region(), s.seq_of_row.region(), s.pos.region(), rows, &kv, &params)?
            }
            Pass::Decode => {
                // The session's capacity, not this step's longest context: the
                // launch is then the same for every token.
                let max_ctx = self.rope.max_pos;
                let d = AttnDecode { out: s.attn.region(), q: s.q.region(), ctx_len: s.ctx_len.region(), batch: rows, max_ctx };
                ops.attention_decode(&d, &kv, &params)?
            }
        }
        linear::apply(ops, &w.o, s.attn.region(), s.o.region(), rows)?;
        // A rank's o is the partial sum over its heads.
        self.all_reduce(s.o.region(), rows * h)?;
        // The sandwich, x = x + post_attention_norm(o) and hn =
        // pre_feedforward_norm(x), then the dense MLP's gate and up in one
        // GEMM and gelu_tanh(gate) · up. At batch 1 the sandwich runs in
        // the gate/up GEMV's prologue, which writes x into the other stream
        // buffer (every block reads the old x while one writes the new);
        // otherwise in place. `resid` holds x from here on, `out` gets the
        // layer's output.
        let sandwich =
            SandwichRow { out: x_next, resid: xr, x: s.o.region(), w_post: Some(w.post_attn_norm.region()), w_pre: w.pre_ff_norm.region() };
        // The sandwich in place (x in `xr`, hn) and the dense gate/up over hn.
        let sandwich_in_place = || {
            ops.post_norm_add_pre_norm_bf16(xr, Some(s.hn.region()), xr, s.o.region(), sandwich.w_post, Some(sandwich.w_pre), rows, h, eps)
        };
        let dense_gate_up = || linear::gated_up(ops, &w.gate_up, s.hn.region(), s.gu.region(), s.act.region(), rows, spec.intermediate);
        // A single-row MoE step on a backend that overlaps concurrent work:
        // after the sandwich on its own, the routing runs beside the
        // experts' input and the dense MLP (gate/up, down), then the
        // experts' GEMVs and the combine. The pieces read only x and hn and
        // write disjoint buffers. The routing is a latency-bound launch with
        // almost no bytes behind it, so the other piece's weight stream uses
        // the memory system meanwhile; the experts' input does not wait for
        // the routing because at one row every slot holds row 0 (a zero
        // pair map gives the routing's bits).
        if let Some(mw) = w.moe.as_ref().filter(|_| m.tp.is_none() && super::moe::dense_mlp_beside(m, rows)) {
            sandwich_in_place()?;
            let this = &*self;
            let zeros = this.one_row_pairs(rows)?;
            let mut e_here = 0;
            super::enqueue_concurrent(
                ops,
                || {
                    e_here = this.moe_route(mw, xr, rows)?;
                    Ok(())
                },
                || {
                    this.moe_expert_input(mw, xr, rows, zeros)?;
                    dense_gate_up()?;
                    Ok(linear::apply(ops, &w.down, s.act.region(), s.mlp.region(), rows)?)
                },
            )?;
            this.moe_expert_ffn(mw, rows, e_here)?;
            let ffn = this.moe_combine(mw, rows)?;
            return self.layer_tail(i, rows, ffn, xr, x_next, false);
        }
        let fused = linear::sandwich_gated_up(ops, &w.gate_up, &sandwich, s.act.region(), rows, spec.intermediate, eps)?;
        let (resid, out) = if fused { (x_next, xr) } else { (xr, x_next) };
        if !fused {
            sandwich_in_place()?;
            dense_gate_up()?;
        }
        let routed = match &w.moe {
            Some(mw) => Some((mw, self.moe_route(mw, resid, rows)?)),
            None => None,
        };
        linear::apply(ops, &w.down, s.act.region(), s.mlp.region(), rows)?;

        // A rank's MLP output is the partial sum over its intermediate
        // columns (and its experts'): summed over the ranks once.
        let ffn = match routed {
            Some((mw, e_here)) => self.moe_experts(mw, resid, rows, e_here)?,
            None => {
                self.all_reduce(s.mlp.region(), rows * h)?;
                s.mlp.region()
            }
        };
        self.layer_tail(i, rows, ffn, resid, out, fused)
    }

    /// The end of layer `i` from the FFN output `ffn`: the per-layer-input
    /// branch (when the model has one) and the layer output into `out`, or
    /// the output left pending for the next layer's input norm. `resid`
    /// holds x; `fused`: the sandwich took the other stream buffer for x, so
    /// the stream does not move.
    fn layer_tail(&mut self, i: usize, rows: usize, ffn: Region, resid: Region, out: Region, fused: bool) -> Result<()> {
        let m = self.model;
        let (ops, cfg, w) = (&m.ops, &m.cfg, &m.weights.layers[i]);
        let (h, eps) = (cfg.hidden_size, cfg.eps);
        let s = &self.s;
        match (&w.per_layer, &s.per_layer, cfg.per_layer_input) {
            (Some(pw), Some(ps), Some(pl)) => {
                let (l, p, cap) = (cfg.num_layers(), pl.hidden, s.rows);
                // x = x + post_feedforward_norm(ffn), in place (the layer_scalar
                // comes after the per-layer branch, as in HF).
                ops.post_norm_add_pre_norm_bf16(resid, None, resid, ffn, Some(w.post_ff_norm.region()), None, rows, h, eps)?;
                // gate = per_layer_input_gate(x) into the gate rows of `src`.
                let gate = ps.src.region().slice(cap * l * p * 2, rows * p * 2)?;
                linear::apply(ops, &pw.gate, resid, gate, rows)?;
                // Pair each row's gate with its per-layer input (an exact
                // copy), then gelu_tanh(gate) · input in gelu_mul's layout.
                let idx = ps.idx.region().slice(i * 2 * rows * 4, 2 * rows * 4)?;
                ops.gather_rows_bf16(ps.pair.region(), ps.src.region(), idx, 2 * rows, cap * l + cap, p)?;
                ops.gelu_mul_bf16(ps.act.region(), ps.pair.region(), rows, p)?;
                linear::apply(ops, &pw.projection, ps.act.region(), s.o.region(), rows)?;
                // x_next = (x + post_per_layer_input_norm(projection)) · layer_scalar.
                ops.layer_out_bf16(out, resid, s.o.region(), Some(pw.post_norm.region()), w.layer_scalar.region(), rows, h, eps)?;
            }
            (None, _, None) => {
                // x_next = (x + post_feedforward_norm(ffn)) · layer_scalar: left to the
                // next layer's input norm (`InputNorm::pending`) or the head.
                let layer_scalar = w.layer_scalar.region();
                self.pending_out = Some(LayerOutRow { out, mid: resid, x: ffn, w_post: Some(w.post_ff_norm.region()), layer_scalar });
            }
            _ => return Err(Error::Request(format!("layer {i}: per-layer-input weights and config disagree"))),
        }
        // The output went to the buffer `x_next` names unless the fused
        // sandwich took that one for x.
        if !fused {
            self.cur = 1 - self.cur;
        }
        Ok(())
    }
}
