// WGSL prelude
