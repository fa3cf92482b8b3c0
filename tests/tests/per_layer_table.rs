//! Where the per-layer input table lives (ARCHITECTURE.md, "Per-layer
//! inputs"): the decision's measurement. Per decode step, the graph needs
//! one row of `layers · P` bf16 per token. Kept on the device, a gather
//! kernel copies it from the whole table; kept on the host, the row is
//! read from the memory-mapped checkpoint and uploaded. This times both per
//! step on the backends here, at E2B's row width (35 · 256), with a table
//! of 4096 rows (the per-step work does not depend on the row count; the
//! E2B table itself, 262144 rows, is 4.7 GB). 4096 rows is 73 MB: a
//! 16384-row table (294 MB) cannot even be bound on lavapipe, whose
//! `max_storage_buffer_binding_size` is 128 MiB, and neither could E2B's on
//! most wgpu adapters.
//!
//! A timing, not a check: `cargo test -p switchyard-tests --test
//! per_layer_table -- --ignored --nocapture`.
use std::time::Instant;
use switchyard_core::codec::bytes;
use switchyard_core::DeviceBuffer;
use switchyard_kernels::Ops;
use switchyard_model::checkpoint::HostRows;

const ROWS: usize = 4096;
const WIDTH: usize = 35 * 256;
const STEPS: usize = 200;

#[test]
#[ignore = "a timing for ARCHITECTURE.md, not a check: run with --ignored --nocapture"]
fn per_step_cost_of_the_per_layer_table_on_host_and_on_device() {
    let bits: Vec<u16> = (0..ROWS * WIDTH).map(|i| 0x3f80 + (i % 97) as u16).collect();
    let table_bytes: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
    let host = HostRows::from_bf16("embed_tokens_per_layer.weight", bits, ROWS, WIDTH).unwrap();
    let ids: Vec<u32> = (0..STEPS as u32).map(|s| (s * 7919) % ROWS as u32).collect();
    for name in ["cpu", "wgpu"] {
        let be = match switchyard_cli::backends::open(name) {
            Ok(be) => be,
            Err(e) => {
                println!("{name}: not timed ({e})");
                continue;
            }
        };
        let ops = Ops::new(be.clone());
        let device_table = DeviceBuffer::from_bytes(&be, &table_bytes).unwrap();
        let out = DeviceBuffer::new(&be, WIDTH * 2).unwrap();
        let idx = DeviceBuffer::new(&be, 4).unwrap();
        // Host: gather the row, upload it.
        let mut row = Vec::with_capacity(WIDTH * 2);
        let t = Instant::now();
        for &id in &ids {
            row.clear();
            host.gather_bf16(&[id], &mut row).unwrap();
            out.write(&row).unwrap();
        }
        be.synchronize().unwrap();
        let host_us = t.elapsed().as_secs_f64() * 1e6 / STEPS as f64;
        // Device: upload the id (needed anyway), gather from the resident table.
        let t = Instant::now();
        for &id in &ids {
            idx.write(&bytes::i32_bytes(&[id as i32])).unwrap();
            ops.gather_rows_bf16(out.region(), device_table.region(), idx.region(), 1, ROWS, WIDTH).unwrap();
        }
        be.synchronize().unwrap();
        let device_us = t.elapsed().as_secs_f64() * 1e6 / STEPS as f64;
        println!(
            "{name}: per step, host gather + upload of {} KiB: {host_us:.1} us; device-resident gather: {device_us:.1} us \
             (device memory the table would take at E2B size: {:.2} GB)",
            WIDTH * 2 / 1024,
            262_144.0 * WIDTH as f64 * 2.0 / 1e9
        );
    }
}
