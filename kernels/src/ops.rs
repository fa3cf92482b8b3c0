use std::sync::Arc;
use switchyard_core::{Arg, Backend, Error, KernelSig, Region, Result};

/// Typed launchers. Each method (defined in the kernel's family module)
/// validates shapes, checks that every region covers the bytes the kernel
/// will touch, and calls [`Backend::launch`]; the backend plans the launch.
#[derive(Clone)]
pub struct Ops {
    /// The backend every launch goes to.
    pub be: Arc<dyn Backend>,
}

impl Ops {
    /// Launchers bound to `be`.
    pub fn new(be: Arc<dyn Backend>) -> Self {
        Ops { be }
    }

    /// Checks that each region covers the bytes the kernel will touch
    /// through it and that the range is still allocated, then launches.
    /// The one place launches are range-checked.
    pub(crate) fn launch(&self, sig: &'static KernelSig, args: &[LaunchArg]) -> Result<()> {
        debug_assert_eq!(args.len(), sig.args.len(), "launcher of {} out of step with its signature", sig.symbol);
        let mut plain = Vec::with_capacity(args.len());
        for (a, spec) in args.iter().zip(sig.args) {
            plain.push(match *a {
                LaunchArg::Buf(None) => Arg::P(0),
                LaunchArg::Buf(Some((region, touches))) => {
                    if touches > region.len() {
                        return Err(Error::oob(
                            sig.symbol,
                            spec.name,
                            format!("the kernel touches {touches} bytes; the region holds {}", region.len()),
                        ));
                    }
                    if touches > 0 {
                        self.be.check_range(region.addr(), touches).map_err(|d| Error::oob(sig.symbol, spec.name, d))?;
                    }
                    Arg::P(region.addr())
                }
                LaunchArg::Scalar(s) => s,
            });
        }
        self.be.launch(sig, &plain)
    }
}

/// One argument of a typed launch: a buffer region with the bytes the kernel
/// touches through it (`None`: a null pointer), or a scalar.
#[derive(Clone, Copy, Debug)]
pub(crate) enum LaunchArg {
    Buf(Option<(Region, usize)>),
    Scalar(Arg),
}

/// A region the kernel touches `touches` bytes of (from its start).
pub(crate) fn region(r: Region, touches: usize) -> LaunchArg {
    LaunchArg::Buf(Some((r, touches)))
}

/// An optional region: null when absent.
pub(crate) fn optional(r: Option<Region>, touches: usize) -> LaunchArg {
    LaunchArg::Buf(r.map(|r| (r, touches)))
}

/// A scalar argument.
pub(crate) fn scalar(a: Arg) -> LaunchArg {
    LaunchArg::Scalar(a)
}

/// The product of sizes, saturating at `usize::MAX`: a shape whose size
/// overflows cannot fit in any region, so a saturated size makes the range
/// check refuse it, where a plain `*` would panic (debug) or wrap to a
/// small size that passes (release). Found by the `launch_validator` fuzz target.
pub(crate) fn saturating_product(xs: &[usize]) -> usize {
    xs.iter().fold(1usize, |acc, &x| acc.saturating_mul(x))
}

/// Converts a size to the kernel's i32, naming the argument on overflow.
pub(crate) fn i32_arg(kernel: &str, name: &str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| Error::invalid(kernel, name, format!("{v} does not fit in i32")))
}

/// Requires `cond`, else an `InvalidArgument` naming the argument and constraint.
pub(crate) fn require(cond: bool, kernel: &str, name: &str, constraint: impl FnOnce() -> String) -> Result<()> {
    if cond {
        Ok(())
    } else {
        Err(Error::invalid(kernel, name, constraint()))
    }
}

/// A norm's `eps` (argument `eps`): finite and >= 0.
pub(crate) fn require_eps(kernel: &str, eps: f32) -> Result<()> {
    require(eps.is_finite() && eps >= 0.0, kernel, "eps", || format!("eps = {eps} must be finite and >= 0"))
}

/// Bytes of `n` bf16 elements (saturating, like [`saturating_product`]).
pub(crate) const fn bf16s(n: usize) -> usize {
    n.saturating_mul(2)
}

/// Bytes of `n` 4-byte elements (saturating, like [`saturating_product`]).
pub(crate) const fn words(n: usize) -> usize {
    n.saturating_mul(4)
}
