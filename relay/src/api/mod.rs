//! The relay's HTTP surface. Invariant: only this module knows about HTTP, JSON bodies and SSE.
pub mod mcp;
pub mod rest;
