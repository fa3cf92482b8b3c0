//! Fuzzes the kernel-launch validator on the CPU reference backend: any
//! registered kernel with an argument list of arbitrary length and kinds
//! (pointers into live buffers, past their ends, into freed allocations,
//! null, or random), arbitrary grid and block, and the typed `Ops`
//! launchers with arbitrary shapes. Every failure must be a typed `Error`;
//! nothing may panic, hang or leak. The body is `launch_once` in src/lib.rs.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    switchyard_fuzz_support::launch_once(data);
});
