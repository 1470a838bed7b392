//! headers
