//! Per-dispatch GPU time from timestamp queries (`WgpuBackend::time_dispatches`,
//! what `switchyard bench --backend wgpu` shows as its GPU ms column).
//! lavapipe has timestamp queries; an adapter without them must say so.
use std::sync::Arc;
use switchyard_core::codec::bytes;
use switchyard_core::{Backend, DeviceBuffer, Error};
use switchyard_kernels::Ops;
use switchyard_wgpu::{WgpuBackend, WgpuOptions};

mod common;
use common::backend;

fn wgpu_of(be: &Arc<dyn Backend>) -> &WgpuBackend {
    be.extension().and_then(|e| e.downcast_ref::<WgpuBackend>()).expect("the wgpu backend's extension is the WgpuBackend")
}

fn dispatches_are_timed_in_order_across_batches() {
    let name = "dispatches_are_timed_in_order_across_batches";
    // A batch of 8 dispatches, so 15 units of two or more dispatches span
    // several submits.
    let be = backend(name, WgpuOptions { max_batch: 8, ..WgpuOptions::default() });
    let w = wgpu_of(&be);
    let info = be.info();
    let note = &info.details.iter().find(|(k, _)| k == "gpu_timing").expect("info reports gpu_timing").1;
    eprintln!("{name}: {} ({note})", info.device);
    if let Err(why) = w.gpu_timing() {
        // Said, not silently empty: the bench column reports this reason.
        assert!(note.starts_with("unavailable") && note.contains(&why), "{note} / {why}");
        let e = w.time_dispatches(&mut || Ok(())).unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)), "{e}");
        return;
    }
    let ops = Ops::new(be.clone());
    let (m, vocab) = (4usize, 50_000usize);
    let logits: Vec<f32> = (0..m * vocab).map(|i| ((i * 7919) % 1000) as f32).collect();
    let l = DeviceBuffer::from_bytes(&be, &bytes::f32_bytes(&logits)).unwrap();
    let (idx, val) = (DeviceBuffer::zeroed(&be, 4 * m).unwrap(), DeviceBuffer::zeroed(&be, 4 * m).unwrap());
    let n = 4096usize;
    let (acc, x) = (DeviceBuffer::zeroed(&be, 2 * n).unwrap(), DeviceBuffer::from_bytes(&be, &vec![0x3fu8; 2 * n]).unwrap());
    // One unit is two different kernels, so the order of the timed entries
    // is visible whatever number of passes each kernel's plan takes.
    let unit = || -> switchyard_core::Result<()> {
        ops.argmax_rows(idx.region(), val.region(), l.region(), m, vocab, -1, -1)?;
        ops.scaled_add_bf16(acc.region(), x.region(), n, 0.5)
    };
    let unit_entries: Vec<_> = w.time_dispatches(&mut || unit()).unwrap().into_iter().map(|t| t.entry).collect();
    assert!(unit_entries.len() >= 2, "{unit_entries:?}");
    assert!(unit_entries[0].starts_with("argmax_rows"), "{unit_entries:?}");
    assert_eq!(unit_entries.last().copied(), Some("scaled_add_bf16"), "{unit_entries:?}");
    let per_unit = unit_entries.len();
    let launches = 15;
    let times = w
        .time_dispatches(&mut || {
            for _ in 0..launches {
                unit()?;
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(times.len(), per_unit * launches, "{times:?}");
    for (k, t) in times.iter().enumerate() {
        assert_eq!(t.entry, unit_entries[k % per_unit], "dispatch {k}");
        assert!(t.ms.is_finite() && t.ms >= 0.0 && t.ms < 10_000.0, "{t:?}");
    }
    let total: f64 = times.iter().map(|t| t.ms).sum();
    assert!(total > 0.0, "timestamps never advanced: {times:?}");
    eprintln!("{name}: {} dispatches, {total:.3} ms of GPU time; first unit {:?}", times.len(), &times[..per_unit]);

    // The results are the kernel's: timing changes nothing it computes.
    let got = bytes::i32_from_bytes(&idx.to_vec().unwrap());
    for (i, &g) in got.iter().enumerate() {
        let row = &logits[i * vocab..(i + 1) * vocab];
        let best = row.iter().cloned().fold(f32::MIN, f32::max);
        assert_eq!(g as usize, row.iter().position(|&x| x == best).unwrap());
    }

    // Work before the call is not timed; nothing is timed after it returns.
    ops.argmax_rows(idx.region(), val.region(), l.region(), m, vocab, -1, -1).unwrap();
    let one = w.time_dispatches(&mut || unit()).unwrap();
    assert_eq!(one.len(), per_unit);
    ops.argmax_rows(idx.region(), val.region(), l.region(), m, vocab, -1, -1).unwrap();
    be.synchronize().unwrap();

    // A replay is timed dispatch by dispatch, across submits of max_batch
    // (8) dispatches, and computes what the untimed replay computes.
    let rec = be
        .record(&mut || {
            for _ in 0..6 {
                unit()?;
            }
            Ok(())
        })
        .unwrap();
    be.replay(&rec).unwrap();
    idx.write(&vec![0xffu8; 4 * m]).unwrap();
    let replayed = w.time_dispatches(&mut || be.replay(&rec)).unwrap();
    assert_eq!(replayed.len(), 6 * per_unit, "{replayed:?}");
    for (k, t) in replayed.iter().enumerate() {
        assert_eq!(t.entry, unit_entries[k % per_unit], "replayed dispatch {k}");
        assert!(t.ms.is_finite() && t.ms >= 0.0 && t.ms < 10_000.0, "{t:?}");
    }
    assert_eq!(bytes::i32_from_bytes(&idx.to_vec().unwrap()), got, "a timed replay's argmax");
    be.replay(&rec).unwrap();
    be.synchronize().unwrap();

    // Refused while recording, and not nested.
    let e = be.record(&mut || w.time_dispatches(&mut || Ok(())).map(drop)).unwrap_err();
    assert!(e.to_string().contains("record"), "{e}");
    let e = w.time_dispatches(&mut || w.time_dispatches(&mut || Ok(())).map(drop)).unwrap_err();
    assert!(e.to_string().contains("already being timed"), "{e}");
    // A failed timing leaves the backend usable, and timing off.
    ops.argmax_rows(idx.region(), val.region(), l.region(), m, vocab, -1, -1).unwrap();
    be.synchronize().unwrap();
    assert_eq!(w.time_dispatches(&mut || Ok(())).unwrap(), vec![]);
}

switchyard_test_harness::tests!(needs "wgpu": dispatches_are_timed_in_order_across_batches);
switchyard_test_harness::main!(common::probe);
