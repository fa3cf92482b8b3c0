//! Prints the per-launch overhead of the wgpu backend:
//! `cargo run --release -p switchyard-wgpu --example overhead [N]`.
//! "batched" is the default (a submit every 64 dispatches); "record only"
//! never submits inside the timed loop, so its host figure is the pure cost
//! of validating and recording a launch.
use switchyard_wgpu::{launch_overhead, wgpu_backend_with, WgpuOptions};

fn main() -> switchyard_core::Result<()> {
    let n = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let be = wgpu_backend_with(WgpuOptions::default())?;
    println!("adapter: {} ({})", be.info().device, be.info().driver);
    for _ in 0..3 {
        println!("batched:     {}", launch_overhead(&be, n)?);
    }
    let big = wgpu_backend_with(WgpuOptions { max_batch: n + 64, ..WgpuOptions::default() })?;
    for _ in 0..3 {
        println!("record only: {}", launch_overhead(&big, n)?);
    }
    Ok(())
}
