//! backend-wgpu (in progress)
