use crate::{Backend, Error, Result};
use std::sync::Arc;

/// An owned device allocation; freed when dropped.
pub struct DeviceBuffer {
    backend: Arc<dyn Backend>,
    addr: u64,
    bytes: usize,
}

impl DeviceBuffer {
    /// Allocates `bytes` on `backend`.
    pub fn new(backend: &Arc<dyn Backend>, bytes: usize) -> Result<Self> {
        let addr = backend.alloc(bytes)?;
        Ok(DeviceBuffer { backend: backend.clone(), addr, bytes })
    }

    /// Allocates and uploads `data`.
    pub fn from_bytes(backend: &Arc<dyn Backend>, data: &[u8]) -> Result<Self> {
        let b = Self::new(backend, data.len())?;
        backend.upload(b.addr, data)?;
        Ok(b)
    }

    /// Allocates `bytes` and zeroes them.
    pub fn zeroed(backend: &Arc<dyn Backend>, bytes: usize) -> Result<Self> {
        let b = Self::new(backend, bytes)?;
        backend.memset0(b.addr, bytes)?;
        Ok(b)
    }

    /// Base device address.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Address `byte_offset` bytes in; the offset may equal the length (an
    /// empty tail) but not exceed it.
    pub fn at(&self, byte_offset: usize) -> Result<u64> {
        if byte_offset > self.bytes {
            return Err(Error::oob(
                "DeviceBuffer::at",
                "byte_offset",
                format!("offset {byte_offset} past the end of a {}-byte buffer", self.bytes),
            ));
        }
        Ok(self.addr + byte_offset as u64)
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// Whether the buffer is empty (never true: allocations are non-empty).
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// Copies the whole buffer to the host.
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        let mut v = vec![0u8; self.bytes];
        self.backend.download(self.addr, &mut v)?;
        Ok(v)
    }

    /// Uploads `data` at the start of the buffer.
    pub fn write(&self, data: &[u8]) -> Result<()> {
        if data.len() > self.bytes {
            return Err(Error::oob("DeviceBuffer::write", "data", format!("{} bytes into a {}-byte buffer", data.len(), self.bytes)));
        }
        self.backend.upload(self.addr, data)
    }

    /// The backend that owns this buffer.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // A failing free at drop has nowhere to go; the backend's live-bytes
        // accounting still shows the leak.
        let _ = self.backend.free(self.addr);
    }
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceBuffer({}, {:#x}, {} bytes)", self.backend.name(), self.addr, self.bytes)
    }
}
