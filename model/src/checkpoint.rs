//! Reading an HF checkpoint: `config.json` plus `model.safetensors`, or the
//! shards named by `model.safetensors.index.json`; memory-mapped, headers
//! parsed (and validated by the `safetensors` crate) once per shard. Tensors
//! come back as bf16 bits whatever their stored float type, so the rest of the
//! loader deals with one format.
//!
//! Names are looked up without the wrapper prefix: `model.` (Gemma4ForCausalLM)
//! and `model.language_model.` (Gemma4ForConditionalGeneration) both work.
use crate::error::{Error, Result};
use crate::files::{self, Limits};
use crate::text::{self, clip};
use half::{bf16, f16};
use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::{Dtype, SafeTensors};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// Prefixes a text-decoder tensor may carry, tried in this order.
pub const PREFIXES: [&str; 3] = ["model.language_model.", "model.", ""];

/// Bytes of one safetensors file: memory-mapped from disk, embedded in
/// the binary (the default model), or owned (built in memory, fuzzing).
enum Bytes {
    Mapped(memmap2::Mmap),
    Static(&'static [u8]),
    Owned(Vec<u8>),
}

impl Bytes {
    fn get(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Static(s) => s,
            Bytes::Owned(v) => v,
        }
    }
}

/// One safetensors file with its parsed header.
struct Shard {
    name: String,
    /// Shared so that a [`HostRows`] table can outlive the checkpoint.
    bytes: Arc<Bytes>,
    /// Offset of the data section (8 + header length).
    data_start: usize,
    meta: Metadata,
}

impl Shard {
    fn parse(name: String, bytes: Bytes) -> Result<Self> {
        // The safetensors crate reads the header into a map, keeping the last
        // of two entries for one tensor; which copy a load gets must not
        // depend on that, so a repeated name is refused first.
        if let Some(header) = header_bytes(bytes.get()) {
            if let Some(dup) = crate::json::top_level_duplicate(header) {
                return Err(Error::checkpoint(&name, format!("tensor `{}` is listed twice in the safetensors header", clip(&dup))));
            }
        }
        // read_metadata checks the header length, the JSON, and that the
        // offsets tile the data section exactly (so truncation is caught here).
        let (n, meta) =
            SafeTensors::read_metadata(bytes.get()).map_err(|e| Error::checkpoint(&name, format!("unreadable safetensors: {e}")))?;
        Ok(Shard { name, bytes: Arc::new(bytes), data_start: 8 + n, meta })
    }

    fn data(&self, info: &TensorInfo) -> &[u8] {
        let (s, e) = info.data_offsets;
        &self.bytes.get()[self.data_start + s..self.data_start + e]
    }
}

/// The JSON header of a safetensors file, when its length prefix fits the
/// file (anything else is left to the safetensors crate to report).
fn header_bytes(b: &[u8]) -> Option<&[u8]> {
    let n = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
    b.get(8..8usize.checked_add(usize::try_from(n).ok()?)?)
}

/// Stored float formats a [`HostRows`] table converts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RowDtype {
    Bf16,
    F16,
    F32,
}

/// A `[rows, width]` token table left where it is stored (memory-mapped
/// from the checkpoint, or owned) and read a few rows at a time: each
/// gathered row is converted to bf16 on the host, round to nearest even,
/// exactly as a whole-tensor load converts it. The per-layer input table
/// of Gemma 4 E2B / E4B lives here rather than on the device
/// (ARCHITECTURE.md, "Per-layer inputs and KV sharing").
#[derive(Clone)]
pub struct HostRows {
    bytes: Arc<Bytes>,
    /// Byte offset of row 0 in `bytes`.
    start: usize,
    dtype: RowDtype,
    /// Rows of the table.
    pub rows: usize,
    /// Elements per row.
    pub width: usize,
    /// The tensor's name, for messages.
    pub name: String,
}

impl std::fmt::Debug for HostRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostRows({} [{}, {}] {:?})", self.name, self.rows, self.width, self.dtype)
    }
}

impl HostRows {
    /// A table held in memory as bf16 bits, `rows · width` of them.
    pub fn from_bf16(name: &str, bits: Vec<u16>, rows: usize, width: usize) -> Result<Self> {
        if rows.checked_mul(width) != Some(bits.len()) {
            return Err(Error::checkpoint(name, format!("{} values do not make a [{rows}, {width}] table", bits.len())));
        }
        let bytes = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
        Ok(HostRows { bytes: Arc::new(Bytes::Owned(bytes)), start: 0, dtype: RowDtype::Bf16, rows, width, name: name.to_string() })
    }

    /// Appends the bf16 bytes (little-endian) of row `ids[i]` for each `i`
    /// to `out`. An id outside the table is an error naming it.
    pub fn gather_bf16(&self, ids: &[u32], out: &mut Vec<u8>) -> Result<()> {
        let elem = match self.dtype {
            RowDtype::Bf16 | RowDtype::F16 => 2,
            RowDtype::F32 => 4,
        };
        let row_bytes = self.width * elem;
        let data = &self.bytes.get()[self.start..self.start + self.rows * row_bytes];
        out.reserve(ids.len() * self.width * 2);
        for &id in ids {
            let id = id as usize;
            if id >= self.rows {
                return Err(Error::Request(format!("token id {id} is outside {} ({} rows)", self.name, self.rows)));
            }
            let row = &data[id * row_bytes..(id + 1) * row_bytes];
            match self.dtype {
                RowDtype::Bf16 => out.extend_from_slice(row),
                RowDtype::F16 => out.extend(
                    row.chunks_exact(2).flat_map(|c| bf16::from_f32(f16::from_le_bytes([c[0], c[1]]).to_f32()).to_bits().to_le_bytes()),
                ),
                RowDtype::F32 => out.extend(
                    row.chunks_exact(4).flat_map(|c| bf16::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_bits().to_le_bytes()),
                ),
            }
        }
        Ok(())
    }
}

/// A tensor converted to bf16, row-major.
#[derive(Clone, Debug)]
pub struct HostTensor {
    /// The name in the checkpoint (with its prefix).
    pub name: String,
    /// Shape.
    pub shape: Vec<usize>,
    /// bf16 bits.
    pub data: Vec<u16>,
}

/// An empty vector with room for `n` items. Tensor sizes come from the
/// file, so the host copies made from them are reserved fallibly: a tensor
/// too large for memory is an error naming it, not an abort.
pub fn reserve<T>(n: usize, tensor: &str) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|e| {
        Error::checkpoint(
            format!("tensor `{}`", clip(tensor)),
            format!("cannot hold a {}-byte copy in memory: {e}", n.saturating_mul(std::mem::size_of::<T>())),
        )
    })?;
    Ok(v)
}

impl HostTensor {
    /// Values as f32 (exact).
    pub fn to_f32(&self) -> Result<Vec<f32>> {
        let mut v = reserve(self.data.len(), &self.name)?;
        v.extend(self.data.iter().map(|&b| bf16::from_bits(b).to_f32()));
        Ok(v)
    }

    /// Little-endian bytes of the bf16 values.
    pub fn bytes(&self) -> Result<Vec<u8>> {
        let mut v = reserve(self.data.len().saturating_mul(2), &self.name)?;
        v.extend(self.data.iter().flat_map(|b| b.to_le_bytes()));
        Ok(v)
    }
}

/// An opened checkpoint.
pub struct Checkpoint {
    /// `config.json` text.
    pub config_json: String,
    /// Where it came from, for messages.
    pub origin: String,
    shards: Vec<Shard>,
    /// Tensor name → shard index.
    index: HashMap<String, usize>,
}

impl Checkpoint {
    /// Opens `dir/config.json` and `dir/model.safetensors`, or the shards that
    /// `dir/model.safetensors.index.json` lists, with the size caps of
    /// [`Limits::from_env`].
    pub fn open(dir: &Path) -> Result<Self> {
        Self::open_with(dir, &Limits::from_env()?)
    }

    /// [`Checkpoint::open`] with explicit caps. Every file must be a regular
    /// file (a FIFO, device, directory or link loop is refused with what it
    /// is); the JSON files are read only up to `limits.json_bytes`.
    pub fn open_with(dir: &Path, limits: &Limits) -> Result<Self> {
        files::expect_dir(dir, "a checkpoint directory")?;
        let config_path = dir.join("config.json");
        let config_json = String::from_utf8(files::read_capped(&config_path, "config.json", limits.json_bytes)?).map_err(|e| {
            Error::file(&config_path, format!("is not UTF-8 text (invalid byte at offset {})", e.utf8_error().valid_up_to()))
        })?;
        let single = dir.join("model.safetensors");
        let index_path = dir.join("model.safetensors.index.json");
        let origin = text::path(dir);
        if files::present(&single)? {
            let shard = Shard::parse(text::path(&single), Bytes::Mapped(files::map(&single)?))?;
            return Self::assemble(config_json, origin, vec![shard]);
        }
        if !files::present(&index_path)? {
            return Err(Error::Io {
                path: single,
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no model.safetensors or model.safetensors.index.json here"),
            });
        }
        let index = ShardIndex::read(&index_path, limits)?;
        let shards = index
            .files
            .iter()
            .map(|f| {
                let p = dir.join(f);
                Shard::parse(text::path(&p), Bytes::Mapped(files::map(&p)?))
            })
            .collect::<Result<Vec<_>>>()?;
        let ck = Self::assemble(config_json, origin, shards)?;
        ck.check_index(&index, &text::path(&index_path))?;
        Ok(ck)
    }

    /// Every tensor the index maps to a shard must be in that shard's
    /// header: an index that points elsewhere is damaged, and which copy a
    /// load would read is not something to guess.
    fn check_index(&self, index: &ShardIndex, index_name: &str) -> Result<()> {
        for (tensor, file) in &index.map {
            if self.index.get(tensor) != Some(file) {
                let (listed, actual) = (&self.shards[*file].name, self.index.get(tensor).map(|&i| &self.shards[i].name));
                let where_ = match actual {
                    Some(a) => format!("it is in {a}"),
                    None => "no shard the index lists holds it".to_string(),
                };
                return Err(Error::checkpoint(
                    index_name,
                    format!("weight_map maps `{}` to {listed}, whose header does not list it ({where_})", clip(tensor)),
                ));
            }
        }
        Ok(())
    }

    /// A checkpoint held in memory for the life of the program (the default
    /// model embedded in the binary).
    pub fn from_static(origin: &str, config_json: &str, safetensors: &'static [u8]) -> Result<Self> {
        let shard = Shard::parse(format!("{origin}/model.safetensors"), Bytes::Static(safetensors))?;
        Self::assemble(config_json.to_string(), origin.to_string(), vec![shard])
    }

    /// A checkpoint from bytes held in memory (a download, a generated
    /// model, a fuzz input): the same parsing and checks as [`Checkpoint::open`],
    /// with the bytes owned rather than leaked.
    pub fn from_bytes(origin: &str, config_json: String, safetensors: Vec<u8>) -> Result<Self> {
        let shard = Shard::parse(format!("{origin}/model.safetensors"), Bytes::Owned(safetensors))?;
        Self::assemble(config_json, origin.to_string(), vec![shard])
    }

    fn assemble(config_json: String, origin: String, shards: Vec<Shard>) -> Result<Self> {
        let mut index = HashMap::new();
        for (i, s) in shards.iter().enumerate() {
            for name in s.meta.tensors().keys() {
                if let Some(prev) = index.insert(name.clone(), i) {
                    return Err(Error::checkpoint(&s.name, format!("tensor `{}` also appears in {}", clip(name), shards[prev].name)));
                }
            }
        }
        Ok(Checkpoint { config_json, origin, shards, index })
    }

    /// Total bytes of tensor data (for deciding whether a load is "large").
    pub fn data_bytes(&self) -> usize {
        self.shards.iter().map(|s| s.bytes.get().len() - s.data_start).sum()
    }

    /// The full name under which `name` is stored, trying each prefix.
    fn resolve(&self, name: &str) -> Option<(String, usize)> {
        PREFIXES.iter().map(|p| format!("{p}{name}")).find_map(|full| self.index.get(&full).map(|&i| (full, i)))
    }

    /// Whether the checkpoint holds `name` (under any prefix).
    pub fn contains(&self, name: &str) -> bool {
        self.resolve(name).is_some()
    }

    /// Reads tensor `name` (without prefix), checking its shape against
    /// `expected` and converting BF16 / F16 / F32 to bf16 (round to nearest even).
    pub fn tensor(&self, name: &str, expected: &[usize]) -> Result<HostTensor> {
        let (full, s, info) = self.locate(name, expected)?;
        let raw = s.data(info);
        let mut data: Vec<u16> = reserve(raw.len() / width(&full, info.dtype)?, &full)?;
        to_bf16_bits(raw, info.dtype, &mut data);
        Ok(HostTensor { name: full, shape: info.shape.clone(), data })
    }

    /// The part of tensor `name` (stored with shape `expected`) that one
    /// rank of a tensor-parallel group holds, converted as [`Checkpoint::tensor`]
    /// converts. Only the bytes of the slice are read from the mapping, so a
    /// rank faults in only the pages its shard covers: a [`Slice::Lead`]
    /// (rows of `[out, in]`, or experts of `[e, n, k]`) is one contiguous
    /// range; a [`Slice::Cols`] of a 2-D `[n, k]` tensor is copied row by
    /// row, each row's columns one contiguous piece.
    pub fn tensor_slice(&self, name: &str, expected: &[usize], slice: &Slice) -> Result<HostTensor> {
        let (full, s, info) = self.locate(name, expected)?;
        let raw = s.data(info);
        let w = width(&full, info.dtype)?;
        let bad = |what: String| Error::checkpoint(&s.name, format!("tensor `{full}` {expected:?}: {what}"));
        let mut shape = expected.to_vec();
        let data = match slice {
            Slice::Lead(r) => {
                let lead = *expected.first().ok_or_else(|| bad("a scalar has no rows to slice".into()))?;
                if r.start > r.end || r.end > lead {
                    return Err(bad(format!("rows {r:?} are not inside its {lead}")));
                }
                let inner: usize = expected[1..].iter().product();
                shape[0] = r.len();
                let mut data = reserve(r.len() * inner, &full)?;
                to_bf16_bits(&raw[r.start * inner * w..r.end * inner * w], info.dtype, &mut data);
                data
            }
            Slice::Cols(c) => {
                let &[n, k] = expected else { return Err(bad("a column slice needs a 2-D tensor".into())) };
                if c.start > c.end || c.end > k {
                    return Err(bad(format!("columns {c:?} are not inside its {k}")));
                }
                shape[1] = c.len();
                let mut data = reserve(n * c.len(), &full)?;
                for row in 0..n {
                    to_bf16_bits(&raw[(row * k + c.start) * w..(row * k + c.end) * w], info.dtype, &mut data);
                }
                data
            }
        };
        Ok(HostTensor { name: full, shape, data })
    }

    /// The stored name, shard and header entry of tensor `name`, its shape
    /// checked against `expected`.
    fn locate(&self, name: &str, expected: &[usize]) -> Result<(String, &Shard, &TensorInfo)> {
        let (full, shard) =
            self.resolve(name).ok_or_else(|| Error::MissingTensor { name: name.to_string(), expected: expected.to_vec() })?;
        let s = &self.shards[shard];
        let info = s.meta.info(&full).ok_or_else(|| Error::checkpoint(&s.name, format!("index lists `{full}` but its header does not")))?;
        if info.shape != expected {
            return Err(Error::WrongShape { name: full, expected: expected.to_vec(), found: info.shape.clone() });
        }
        Ok((full, s, info))
    }

    /// Tensor `name` (a 2-D `[rows, width]` table) as a [`HostRows`] view of
    /// the stored bytes: shape and dtype are checked here, nothing is
    /// copied, and the mapping stays alive as long as the view does.
    pub fn rows(&self, name: &str, expected: &[usize]) -> Result<HostRows> {
        let (full, shard) =
            self.resolve(name).ok_or_else(|| Error::MissingTensor { name: name.to_string(), expected: expected.to_vec() })?;
        let s = &self.shards[shard];
        let info = s.meta.info(&full).ok_or_else(|| Error::checkpoint(&s.name, format!("index lists `{full}` but its header does not")))?;
        if info.shape != expected || expected.len() != 2 {
            return Err(Error::WrongShape { name: full, expected: expected.to_vec(), found: info.shape.clone() });
        }
        let dtype = match info.dtype {
            Dtype::BF16 => RowDtype::Bf16,
            Dtype::F16 => RowDtype::F16,
            Dtype::F32 => RowDtype::F32,
            other => return Err(Error::WrongDtype { name: full, dtype: format!("{other:?}") }),
        };
        Ok(HostRows {
            bytes: s.bytes.clone(),
            start: s.data_start + info.data_offsets.0,
            dtype,
            rows: expected[0],
            width: expected[1],
            name: full,
        })
    }

    /// Reads tensor `name` as f32 values, keeping F32 data exact (for small
    /// f32 parameters such as `layer_scalar` and `per_expert_scale`).
    pub fn tensor_f32(&self, name: &str, expected: &[usize]) -> Result<Vec<f32>> {
        let t = self.tensor(name, expected)?;
        let (_, shard) = self.resolve(name).expect("resolved above");
        let s = &self.shards[shard];
        let info = s.meta.info(&t.name).expect("resolved above");
        if info.dtype == Dtype::F32 {
            let mut v = reserve(t.data.len(), &t.name)?;
            v.extend(s.data(info).chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])));
            return Ok(v);
        }
        t.to_f32()
    }
}

/// Bytes per stored element of the float dtypes the loader converts.
fn width(name: &str, dtype: Dtype) -> Result<usize> {
    match dtype {
        Dtype::BF16 | Dtype::F16 => Ok(2),
        Dtype::F32 => Ok(4),
        other => Err(Error::WrongDtype { name: name.to_string(), dtype: format!("{other:?}") }),
    }
}

/// Appends the bf16 bits of `raw` (BF16, F16 or F32, little-endian) to
/// `out`, rounding to nearest even.
fn to_bf16_bits(raw: &[u8], dtype: Dtype, out: &mut Vec<u16>) {
    match dtype {
        Dtype::BF16 => out.extend(raw.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]]))),
        Dtype::F16 => out.extend(raw.chunks_exact(2).map(|c| bf16::from_f32(f16::from_le_bytes([c[0], c[1]]).to_f32()).to_bits())),
        _ => out.extend(raw.chunks_exact(4).map(|c| bf16::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_bits())),
    }
}

/// The part of a tensor one tensor-parallel rank holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Slice {
    /// A range of the leading dimension: rows of a `[out, in]` weight
    /// (contiguous), experts of an `[e, n, k]` stack, rows of the token table.
    Lead(std::ops::Range<usize>),
    /// A range of the last dimension of a 2-D `[out, in]` weight (the input
    /// features of `o_proj` and `down_proj`): strided in the file.
    Cols(std::ops::Range<usize>),
}

/// A parsed `model.safetensors.index.json`.
struct ShardIndex {
    /// The distinct shard file names, in first-seen order.
    files: Vec<String>,
    /// Tensor name and position in `files`, in the index's order (so the
    /// first inconsistency reported is the same on every run).
    map: Vec<(String, usize)>,
}

impl ShardIndex {
    fn read(path: &Path, limits: &Limits) -> Result<Self> {
        let bytes = files::read_capped(path, "model.safetensors.index.json", limits.json_bytes)?;
        Self::parse(&text::path(path), &bytes)
    }

    fn parse(name: &str, bytes: &[u8]) -> Result<Self> {
        // Strict: a tensor listed twice in weight_map is refused, not resolved by order.
        let v = crate::json::parse(bytes).map_err(|e| Error::checkpoint(name, format!("index is not valid JSON: {e}")))?;
        let map =
            v.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| Error::checkpoint(name, "index has no `weight_map` object"))?;
        let mut names = Vec::with_capacity(map.len());
        for (tensor, file) in map {
            let f = file.as_str().ok_or_else(|| Error::checkpoint(name, format!("weight_map[`{}`] is not a file name", clip(tensor))))?;
            // Shards live beside the index: a path that climbs out, or names
            // the directory itself, is refused.
            if f.is_empty() || f == "." || f == ".." || f.contains(['/', '\\', '\0']) {
                return Err(Error::checkpoint(name, format!("weight_map[`{}`] = `{}` is not a plain file name", clip(tensor), clip(f))));
            }
            names.push(f);
        }
        if names.is_empty() {
            return Err(Error::checkpoint(name, "weight_map is empty"));
        }
        let (files, of) = dedupe(names);
        Ok(ShardIndex { files, map: map.keys().cloned().zip(of).collect() })
    }
}

/// The distinct names in first-seen order, and the position of each input
/// among them. Hashed: the linear search this replaces made a
/// 300,000-shard index take minutes.
fn dedupe<'a>(names: impl IntoIterator<Item = &'a str>) -> (Vec<String>, Vec<usize>) {
    let mut position: HashMap<&str, usize> = HashMap::new();
    let mut distinct = Vec::new();
    let of = names
        .into_iter()
        .map(|n| {
            *position.entry(n).or_insert_with(|| {
                distinct.push(n.to_string());
                distinct.len() - 1
            })
        })
        .collect();
    (distinct, of)
}

/// bf16 bits of f32 values, round to nearest even (for quantised copies and tests).
pub fn bf16_bits(v: &[f32]) -> Vec<u16> {
    v.iter().map(|&x| bf16::from_f32(x).to_bits()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::test_dir::{tmp, Dir};

    /// A safetensors file of bf16 vectors `name -> [n]`, header written by
    /// hand so that it can say things the serializer would not (a name twice).
    fn st(entries: &[(&str, usize)]) -> Vec<u8> {
        let (mut header, mut off) = (Vec::new(), 0);
        for (name, n) in entries {
            header.push(format!(r#""{name}":{{"dtype":"BF16","shape":[{n}],"data_offsets":[{off},{}]}}"#, off + 2 * n));
            off += 2 * n;
        }
        let mut h = format!("{{{}}}", header.join(",")).into_bytes();
        h.resize(h.len().next_multiple_of(8), b' ');
        let mut out = (h.len() as u64).to_le_bytes().to_vec();
        out.extend(h);
        out.resize(out.len() + off, 0);
        out
    }

    fn err(r: Result<Checkpoint>) -> String {
        match r {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_tensor_listed_twice_in_a_header_is_refused() {
        let mut b = st(&[("a", 2), ("b", 2)]);
        let header = String::from_utf8(b[8..].to_vec()).unwrap().replace("\"b\"", "\"a\"");
        b[8..].copy_from_slice(header.as_bytes());
        let e = err(Checkpoint::from_bytes("t", "{}".into(), b));
        assert!(e.contains("tensor `a` is listed twice in the safetensors header"), "{e}");
        Checkpoint::from_bytes("t", "{}".into(), st(&[("a", 2), ("b", 2)])).expect("distinct names load");
    }

    fn sharded(tag: &str, map: &str, shards: &[(&str, &[(&str, usize)])]) -> Dir {
        let d = tmp(tag);
        std::fs::write(d.0.join("config.json"), "{}").unwrap();
        std::fs::write(d.0.join("model.safetensors.index.json"), format!(r#"{{"weight_map": {map}}}"#)).unwrap();
        for (name, entries) in shards {
            std::fs::write(d.0.join(name), st(entries)).unwrap();
        }
        d
    }

    #[test]
    fn an_index_must_match_the_shard_headers() {
        let shards: &[(&str, &[(&str, usize)])] = &[("s1", &[("a", 2)]), ("s2", &[("b", 2)])];
        let d = sharded("index-ok", r#"{"a": "s1", "b": "s2"}"#, shards);
        let ck = Checkpoint::open_with(&d.0, &Limits::default()).unwrap();
        assert!(ck.contains("a") && ck.contains("b"));
        let d = sharded("index-swapped", r#"{"a": "s2", "b": "s1"}"#, shards);
        let e = err(Checkpoint::open_with(&d.0, &Limits::default()));
        assert!(e.contains("maps `a` to") && e.contains("s2, whose header does not list it (it is in") && e.contains("s1)"), "{e}");
        let d = sharded("index-wrong", r#"{"a": "s2", "b": "s2"}"#, shards);
        let e = err(Checkpoint::open_with(&d.0, &Limits::default()));
        assert!(e.contains("maps `a` to") && e.contains("(no shard the index lists holds it)"), "{e}");
        let d = sharded("index-ghost", r#"{"a": "s1", "b": "s2", "c": "s1"}"#, shards);
        let e = err(Checkpoint::open_with(&d.0, &Limits::default()));
        assert!(e.contains("maps `c` to") && e.contains("no shard the index lists holds it"), "{e}");
        let d = sharded("index-dup", r#"{"a": "s1", "a": "s1", "b": "s2"}"#, shards);
        let e = err(Checkpoint::open_with(&d.0, &Limits::default()));
        assert!(e.contains("duplicate key `a`"), "{e}");
    }

    #[test]
    fn shard_names_must_be_plain_file_names() {
        for bad in [".", "..", "", "../x", "a/b", "a\\\\b"] {
            let e = ShardIndex::parse("idx", format!(r#"{{"weight_map": {{"t": "{bad}"}}}}"#).as_bytes()).err().unwrap().to_string();
            assert!(e.contains("is not a plain file name"), "{bad:?}: {e}");
        }
        let e = ShardIndex::parse("idx", br#"{"weight_map": {"t\u001b]0;x\u0007": "a/b"}}"#).err().unwrap().to_string();
        assert!(e.contains("t\\u{1b}]0;x\\u{7}") && !e.contains('\u{1b}'), "{e}");
    }

    /// 300,000 distinct shard names: de-duplication is linear (it was
    /// quadratic: 4.5·10^10 comparisons, minutes at this size).
    #[test]
    fn shard_names_dedupe_in_linear_time() {
        let names: Vec<String> = (0..300_000).map(|i| format!("shard-{i}.safetensors")).collect();
        let t0 = std::time::Instant::now();
        let (distinct, of) = dedupe(names.iter().map(String::as_str).chain(["shard-7.safetensors"]));
        assert!(t0.elapsed().as_secs() < 10, "took {:?}", t0.elapsed());
        assert_eq!((distinct.len(), of.len(), of[300_000], of[299_999]), (300_000, 300_001, 7, 299_999));
        let idx = ShardIndex::parse("idx", br#"{"weight_map": {"b": "s2", "a": "s1", "c": "s2"}}"#).unwrap();
        assert_eq!(idx.files, ["s1", "s2"]);
        assert_eq!(idx.map, [("a".to_string(), 0), ("b".to_string(), 1), ("c".to_string(), 1)]);
    }

    #[test]
    fn what_the_directory_holds_is_named() {
        let d = tmp("nothing");
        std::fs::write(d.0.join("config.json"), "{}").unwrap();
        let e = err(Checkpoint::open_with(&d.0, &Limits::default()));
        assert!(e.contains("model.safetensors: no model.safetensors or model.safetensors.index.json here"), "{e}");
        std::fs::create_dir(d.0.join("model.safetensors")).unwrap();
        let e = err(Checkpoint::open_with(&d.0, &Limits::default()));
        assert!(e.contains("model.safetensors: is a directory, not a regular file"), "{e}");
        std::fs::write(d.0.join("config.json"), b"{\"a\": \"\xff\"}").unwrap();
        let e = err(Checkpoint::open_with(&d.0, &Limits::default()));
        assert!(e.contains("config.json: is not UTF-8 text (invalid byte at offset 7)"), "{e}");
    }
}
