//! Reading an HF checkpoint: `config.json` plus `model.safetensors`, or the
//! shards named by `model.safetensors.index.json`; memory-mapped, headers
//! parsed (and validated by the `safetensors` crate) once per shard. Tensors
//! come back as bf16 bits whatever their stored float type, so the rest of the
//! loader deals with one format.
//!
//! Names are looked up without the wrapper prefix: `model.` (Gemma4ForCausalLM)
//! and `model.language_model.` (Gemma4ForConditionalGeneration) both work.
use crate::error::{Error, Result};
use half::{bf16, f16};
use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::{Dtype, SafeTensors};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

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
    bytes: Bytes,
    /// Offset of the data section (8 + header length).
    data_start: usize,
    meta: Metadata,
}

impl Shard {
    fn parse(name: String, bytes: Bytes) -> Result<Self> {
        // read_metadata checks the header length, the JSON, and that the
        // offsets tile the data section exactly (so truncation is caught here).
        let (n, meta) =
            SafeTensors::read_metadata(bytes.get()).map_err(|e| Error::checkpoint(&name, format!("unreadable safetensors: {e}")))?;
        Ok(Shard { name, bytes, data_start: 8 + n, meta })
    }

    fn data(&self, info: &TensorInfo) -> &[u8] {
        let (s, e) = info.data_offsets;
        &self.bytes.get()[self.data_start + s..self.data_start + e]
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

impl HostTensor {
    /// Values as f32 (exact).
    pub fn to_f32(&self) -> Vec<f32> {
        self.data.iter().map(|&b| bf16::from_bits(b).to_f32()).collect()
    }

    /// Little-endian bytes of the bf16 values.
    pub fn bytes(&self) -> Vec<u8> {
        self.data.iter().flat_map(|b| b.to_le_bytes()).collect()
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

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })
}

fn map(path: &Path) -> Result<memmap2::Mmap> {
    let f = std::fs::File::open(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
    // SAFETY: the map is read-only; a checkpoint changed underneath a running
    // load is outside what any loader can defend against (as with HF's).
    unsafe { memmap2::Mmap::map(&f) }.map_err(|source| Error::Io { path: path.to_path_buf(), source })
}

impl Checkpoint {
    /// Opens `dir/config.json` and `dir/model.safetensors`, or the shards that
    /// `dir/model.safetensors.index.json` lists.
    pub fn open(dir: &Path) -> Result<Self> {
        let config_path = dir.join("config.json");
        let config_json = String::from_utf8(read(&config_path)?)
            .map_err(|_| Error::config("<file>", format!("{} is not UTF-8", config_path.display())))?;
        let single = dir.join("model.safetensors");
        let index_path = dir.join("model.safetensors.index.json");
        let files: Vec<PathBuf> = if single.exists() {
            vec![single]
        } else if index_path.exists() {
            shard_files(&index_path)?.into_iter().map(|f| dir.join(f)).collect()
        } else {
            return Err(Error::Io {
                path: single,
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no model.safetensors or model.safetensors.index.json here"),
            });
        };
        let shards = files.iter().map(|p| Shard::parse(p.display().to_string(), Bytes::Mapped(map(p)?))).collect::<Result<Vec<_>>>()?;
        Self::assemble(config_json, dir.display().to_string(), shards)
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
                    return Err(Error::checkpoint(&s.name, format!("tensor `{name}` also appears in {}", shards[prev].name)));
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
        let (full, shard) =
            self.resolve(name).ok_or_else(|| Error::MissingTensor { name: name.to_string(), expected: expected.to_vec() })?;
        let s = &self.shards[shard];
        let info = s.meta.info(&full).ok_or_else(|| Error::checkpoint(&s.name, format!("index lists `{full}` but its header does not")))?;
        if info.shape != expected {
            return Err(Error::WrongShape { name: full, expected: expected.to_vec(), found: info.shape.clone() });
        }
        let raw = s.data(info);
        let data: Vec<u16> = match info.dtype {
            Dtype::BF16 => raw.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect(),
            Dtype::F16 => raw.chunks_exact(2).map(|c| bf16::from_f32(f16::from_le_bytes([c[0], c[1]]).to_f32()).to_bits()).collect(),
            Dtype::F32 => raw.chunks_exact(4).map(|c| bf16::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_bits()).collect(),
            other => return Err(Error::WrongDtype { name: full, dtype: format!("{other:?}") }),
        };
        Ok(HostTensor { name: full, shape: info.shape.clone(), data })
    }

    /// Reads tensor `name` as f32 values, keeping F32 data exact (for small
    /// f32 parameters such as `layer_scalar` and `per_expert_scale`).
    pub fn tensor_f32(&self, name: &str, expected: &[usize]) -> Result<Vec<f32>> {
        let t = self.tensor(name, expected)?;
        let (_, shard) = self.resolve(name).expect("resolved above");
        let s = &self.shards[shard];
        let info = s.meta.info(&t.name).expect("resolved above");
        if info.dtype == Dtype::F32 {
            return Ok(s.data(info).chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect());
        }
        Ok(t.to_f32())
    }
}

/// The distinct shard file names in an index's `weight_map`, in first-seen order.
fn shard_files(index_path: &Path) -> Result<Vec<String>> {
    let name = index_path.display().to_string();
    let v: serde_json::Value =
        serde_json::from_slice(&read(index_path)?).map_err(|e| Error::checkpoint(&name, format!("index is not valid JSON: {e}")))?;
    let map =
        v.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| Error::checkpoint(&name, "index has no `weight_map` object"))?;
    let mut files: Vec<String> = Vec::new();
    for (tensor, file) in map {
        let f = file.as_str().ok_or_else(|| Error::checkpoint(&name, format!("weight_map[{tensor}] is not a file name")))?;
        // Shards live beside the index; a path that climbs out is refused.
        if f.contains('/') || f.contains('\\') || f == ".." || f.is_empty() {
            return Err(Error::checkpoint(&name, format!("weight_map[{tensor}] = `{f}` is not a plain file name")));
        }
        if !files.iter().any(|x| x == f) {
            files.push(f.to_string());
        }
    }
    if files.is_empty() {
        return Err(Error::checkpoint(&name, "weight_map is empty"));
    }
    Ok(files)
}

/// bf16 bits of f32 values, round to nearest even (for quantised copies and tests).
pub fn bf16_bits(v: &[f32]) -> Vec<u16> {
    v.iter().map(|&x| bf16::from_f32(x).to_bits()).collect()
}
