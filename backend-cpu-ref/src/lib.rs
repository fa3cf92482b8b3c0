//! backend-cpu-ref (in progress)
