//! # switchyard-core
//!
//! The interface every Switchyard backend implements, and the vocabulary shared
//! by the kernel catalogue, the backends and the model:
//!
//! - [`Backend`]: an object-safe device driver (memory, copies, kernel launch
//!   by declaration, recorded launch sequences, synchronisation, timing).
//! - [`BackendKind`]: backend names, written once; [`registry::open`] opens
//!   a backend by kind from whatever drivers are linked.
//! - [`Region`]: a device address with its extent, what launchers take.
//! - [`Recording`]: a launch sequence captured once and replayed.
//! - [`Arg`], [`ArgKind`], [`ArgSpec`], [`KernelSig`]: kernel arguments and the
//!   declared signature every launch is validated against.
//! - [`registry`]: which kernels exist and which backend implements which.
//! - [`DeviceBuffer`]: an RAII allocation handing out device addresses.
//! - [`vaddr`]: the virtual address scheme used by backends without real device
//!   pointers, and [`vaddr::VirtualAllocs`] and [`vaddr::RangeTable`] (live allocations, for bounds checks).
//! - [`codec`]: bf16, fp8 e4m3fn and NVFP4 (e2m1 + e4m3 block scales) codecs.
//! - [`compare`]: tolerance presets and comparisons whose failure messages
//!   name the index, the actual and expected values and the tolerance.
//! - [`comm`]: the [`Communicator`] between the ranks of a tensor-parallel
//!   group, and [`ThreadComm`], its implementation for ranks that are threads.
//! - [`Error`]: the typed error, so callers can tell an unavailable backend from
//!   an invalid argument from an out-of-bounds address.
#![warn(missing_docs)]

mod arg;
mod backend;
mod buffer;
pub mod codec;
pub mod comm;
pub mod compare;
mod error;
mod kind;
mod recording;
mod region;
pub mod registry;
pub mod vaddr;

pub use arg::{Arg, ArgKind, ArgSpec, KernelSig, Role};
pub use backend::{Backend, BackendInfo};
pub use buffer::DeviceBuffer;
pub use comm::{Communicator, ThreadComm};
pub use error::{Error, Result};
pub use kind::BackendKind;
pub use recording::Recording;
pub use region::Region;

/// Element types that kernels read and write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// bfloat16: 1 sign, 8 exponent, 7 mantissa bits.
    BF16,
    /// IEEE-754 binary32.
    F32,
    /// fp8 e4m3fn: no infinities, NaN = 0x7f / 0xff, max 448.
    F8E4M3,
    /// NVFP4 e2m1, packed two per byte (low nibble first).
    F4E2M1,
    /// Unsigned byte.
    U8,
    /// Signed 32-bit integer.
    I32,
    /// Unsigned 32-bit integer.
    U32,
}

impl DType {
    /// Storage size in bits of one element.
    pub fn bits(self) -> usize {
        match self {
            DType::F4E2M1 => 4,
            DType::F8E4M3 | DType::U8 => 8,
            DType::BF16 => 16,
            DType::F32 | DType::I32 | DType::U32 => 32,
        }
    }

    /// Bytes needed to store `n` elements (rounded up for sub-byte types).
    pub fn bytes_for(self, n: usize) -> usize {
        (n * self.bits()).div_ceil(8)
    }

    /// The dtype suffix used in kernel names (`{op}_{dtype}`).
    pub fn suffix(self) -> &'static str {
        match self {
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F8E4M3 => "fp8",
            DType::F4E2M1 => "nvfp4",
            DType::U8 => "u8",
            DType::I32 => "i32",
            DType::U32 => "u32",
        }
    }
}
