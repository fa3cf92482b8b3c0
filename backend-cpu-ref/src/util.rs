//! Utility kernels.
use crate::ctx::Ctx;
use switchyard_core::Result;
use switchyard_kernels::util::COPY_U32;

register!(COPY_U32 => copy_u32);

fn copy_u32(c: &mut Ctx<'_>) -> Result<()> {
    let (out, inp, n) = (c.buf("out")?, c.buf("inp")?, c.u32_size("n")?);
    let v = c.i32s(inp, 0, n)?;
    c.put_i32(out, 0, &v)
}
