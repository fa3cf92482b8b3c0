//! backend-cuda (in progress)
