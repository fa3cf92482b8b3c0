//! Activation buffers for one session, sized once for the largest pass (the
//! prompt) and reused by every later pass, so decode steps allocate nothing.
use crate::config::ModelConfig;
use crate::error::Result;
use std::sync::Arc;
use switchyard_core::{Backend, DeviceBuffer, Region};
use switchyard_kernels::head::MAX_HEAD_ROWS;

/// The MoE branch's buffers.
pub struct MoeScratch {
    pub m1: DeviceBuffer,
    pub rn: DeviceBuffer,
    pub rl: DeviceBuffer,
    pub topk_ids: DeviceBuffer,
    pub topk_w: DeviceBuffer,
    pub counts: DeviceBuffer,
    pub offsets: DeviceBuffer,
    pub cursor: DeviceBuffer,
    pub pair_of_slot: DeviceBuffer,
    pub slot_of_pair: DeviceBuffer,
    pub h2: DeviceBuffer,
    pub g: DeviceBuffer,
    pub egu: DeviceBuffer,
    pub eact: DeviceBuffer,
    pub ey: DeviceBuffer,
    pub comb: DeviceBuffer,
    /// On a tensor-parallel rank: the pairs' expert ids in this rank's
    /// numbering (experts of other ranks out of range), i32 `[rows·k]`.
    pub local_ids: DeviceBuffer,
    /// i32 `[k]` zeros: a one-row step's pair map before its routing runs
    /// (every slot of a one-row step holds row 0, whichever experts the
    /// routing picks).
    pub one_row_pairs: DeviceBuffer,
}

/// The per-layer-input buffers (E2B / E4B), for up to `R` rows per pass
/// with `L` layers of `P` values each.
pub struct PerLayerScratch {
    /// Gathered table rows, uploaded per pass: `[R, L·P]` bf16, unscaled.
    pub tok: DeviceBuffer,
    /// The model projection of the embedding: `[R, L·P]`.
    pub proj: DeviceBuffer,
    /// `[R·L + R, P]`: rows `r·L + i` hold the per-layer inputs (row `r`,
    /// layer `i`), then rows `R·L + r` the current layer's gate output, so
    /// that one `gather_rows_bf16` can pair each gate row with its input.
    pub src: DeviceBuffer,
    /// Per layer, the `2·rows` gather indices `[R·L + r, r·L + i]` (i32),
    /// uploaded per pass.
    pub idx: DeviceBuffer,
    /// `[rows, 2·P]`: gate then per-layer input, per row (`gelu_mul`'s layout).
    pub pair: DeviceBuffer,
    /// `gelu_tanh(gate) · input`, `[R, P]`.
    pub act: DeviceBuffer,
}

/// Every activation buffer, for up to `rows` rows per pass.
pub struct Scratch {
    /// Rows every buffer has room for.
    pub rows: usize,
    pub ids: DeviceBuffer,
    pub pos: DeviceBuffer,
    pub slot: DeviceBuffer,
    pub seq_of_row: DeviceBuffer,
    pub ctx_len: DeviceBuffer,
    /// The residual stream, ping-ponged between layers (layer_out does not
    /// write in place).
    pub x: [DeviceBuffer; 2],
    pub xn: DeviceBuffer,
    /// The raw q, k and v projections, `[rows, nq]` then `[rows, nk]` then `[rows, nv]`.
    pub qkv_raw: DeviceBuffer,
    pub q: DeviceBuffer,
    pub attn: DeviceBuffer,
    pub o: DeviceBuffer,
    pub hn: DeviceBuffer,
    pub gu: DeviceBuffer,
    pub act: DeviceBuffer,
    /// The dense MLP's output `[rows, hidden]`; with an MoE branch, the
    /// experts' combined output follows it (`[2, rows, hidden]` for a pass
    /// of `rows` rows), so a tensor-parallel rank sums both partial outputs
    /// in one all-reduce.
    pub mlp: DeviceBuffer,
    pub moe: Option<MoeScratch>,
    pub per_layer: Option<PerLayerScratch>,
    /// Final-norm rows for the head, `[MAX_HEAD_ROWS, hidden]`.
    pub fnorm: DeviceBuffer,
    /// f32 logits `[MAX_HEAD_ROWS, vocab]`.
    pub logits: DeviceBuffer,
    /// The head's argmax: i32 indices `[MAX_HEAD_ROWS]`, then their f32
    /// logits `[MAX_HEAD_ROWS]` (one region, so a tensor-parallel rank
    /// gathers both at once).
    pub head_out: DeviceBuffer,
    /// Tensor-parallel ranks only: every rank's `head_out`, in rank order.
    pub head_all: Option<DeviceBuffer>,
    /// Tensor-parallel ranks only: every rank's logits `[world, MAX_HEAD_ROWS, vocab / world]`, gathered when a pass returns logits.
    pub logits_all: Option<DeviceBuffer>,
}

fn buf(be: &Arc<dyn Backend>, bytes: usize) -> Result<DeviceBuffer> {
    // Allocations must be non-empty; a zero-sized buffer is never read.
    Ok(DeviceBuffer::new(be, bytes.max(4))?)
}

impl Scratch {
    /// Buffers for passes of up to `rows` rows (and decode batches of up to
    /// `rows` sequences) of a model shaped `cfg` (a tensor-parallel rank's
    /// shard, of a group of `world` ranks).
    pub fn new(be: &Arc<dyn Backend>, cfg: &ModelConfig, rows: usize, world: usize) -> Result<Self> {
        let (h, nh) = (cfg.hidden_size, cfg.num_heads);
        let hd = cfg.layers.iter().map(|l| l.head_dim).max().unwrap_or(0);
        let qkv = cfg.layers.iter().map(|l| (nh + 2 * l.num_kv_heads) * l.head_dim).max().unwrap_or(0);
        let inter = cfg.max_intermediate();
        let bf = |n: usize| buf(be, n * 2);
        let word = |n: usize| buf(be, n * 4);
        let moe = match cfg.moe {
            None => None,
            Some(m) => {
                let n = rows * m.top_k;
                Some(MoeScratch {
                    m1: bf(rows * h)?,
                    rn: bf(rows * h)?,
                    rl: bf(rows * m.num_experts)?,
                    topk_ids: word(n)?,
                    topk_w: word(n)?,
                    counts: word(m.num_experts)?,
                    offsets: word(m.num_experts + 1)?,
                    cursor: word(m.num_experts)?,
                    pair_of_slot: word(n)?,
                    slot_of_pair: word(n)?,
                    h2: bf(rows * h)?,
                    g: bf(n * h)?,
                    egu: bf(n * 2 * m.intermediate)?,
                    eact: bf(n * m.intermediate)?,
                    ey: bf(n * h)?,
                    comb: bf(rows * h)?,
                    local_ids: word(n)?,
                    one_row_pairs: DeviceBuffer::from_bytes(be, &vec![0u8; 4 * m.top_k.max(1)])?,
                })
            }
        };
        let per_layer = match cfg.per_layer_input {
            None => None,
            Some(pl) => {
                let (l, p) = (cfg.num_layers(), pl.hidden);
                Some(PerLayerScratch {
                    tok: bf(rows * l * p)?,
                    proj: bf(rows * l * p)?,
                    src: bf((rows * l + rows) * p)?,
                    idx: word(l * 2 * rows)?,
                    pair: bf(rows * 2 * p)?,
                    act: bf(rows * p)?,
                })
            }
        };
        Ok(Scratch {
            rows,
            per_layer,
            ids: word(rows)?,
            pos: word(rows)?,
            slot: word(rows)?,
            seq_of_row: word(rows)?,
            ctx_len: word(rows)?,
            x: [bf(rows * h)?, bf(rows * h)?],
            xn: bf(rows * h)?,
            qkv_raw: bf(rows * qkv)?,
            q: bf(rows * nh * hd)?,
            attn: bf(rows * nh * hd)?,
            o: bf(rows * h)?,
            hn: bf(rows * h)?,
            gu: bf(rows * 2 * inter)?,
            act: bf(rows * inter)?,
            mlp: bf(rows * h * if cfg.moe.is_some() { 2 } else { 1 })?,
            moe,
            fnorm: bf(MAX_HEAD_ROWS * h)?,
            logits: word(MAX_HEAD_ROWS * cfg.vocab_size)?,
            head_out: word(2 * MAX_HEAD_ROWS)?,
            head_all: if world > 1 { Some(word(world * 2 * MAX_HEAD_ROWS)?) } else { None },
            logits_all: if world > 1 { Some(word(world * MAX_HEAD_ROWS * cfg.vocab_size)?) } else { None },
        })
    }
}

impl Scratch {
    /// The head's argmax indices, i32 `[MAX_HEAD_ROWS]`.
    pub fn idx(&self) -> Region {
        self.head_out.region().slice(0, MAX_HEAD_ROWS * 4).expect("head_out holds indices then values")
    }

    /// The head's argmax values, f32 `[MAX_HEAD_ROWS]`.
    pub fn val(&self) -> Region {
        self.head_out.region().slice(MAX_HEAD_ROWS * 4, MAX_HEAD_ROWS * 4).expect("head_out holds indices then values")
    }
}
