//! switchyard-model
