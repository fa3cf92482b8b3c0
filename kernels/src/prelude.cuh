// CUDA prelude
