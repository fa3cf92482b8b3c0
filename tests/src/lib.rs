//! shared test support
