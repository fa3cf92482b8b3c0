//! On a machine without the NVIDIA driver (CI, this project's CPU machines),
//! opening the CUDA backend must return `Error::Unavailable` with a reason —
//! never panic — even though cudarc itself panics on a missing libcuda.
use switchyard_core::Error;

mod common;

fn no_driver_means_unavailable_not_a_panic() {
    let opened = std::panic::catch_unwind(switchyard_cuda::cuda_backend);
    let result = opened.expect("cuda_backend() panicked");
    match result {
        Err(Error::Unavailable { backend, reason }) => {
            assert_eq!(backend, "cuda");
            assert!(!reason.is_empty());
            println!("cuda unavailable (expected without a GPU): {reason}");
        }
        Err(other) => panic!("expected Error::Unavailable, got {other:?}"),
        Ok(be) => panic!("a CUDA device opened ({}) after the harness found none", be.info().device),
    }
}

fn unavailable_message_says_cuda_is_unavailable() {
    let text = switchyard_cuda::cuda_backend().err().expect("the harness found no CUDA device").to_string();
    assert!(text.contains("cuda") && text.contains("unavailable"), "{text}");
}

switchyard_test_harness::tests!(needs "no-cuda-device": no_driver_means_unavailable_not_a_panic, unavailable_message_says_cuda_is_unavailable);
switchyard_test_harness::main!(common::probe);
