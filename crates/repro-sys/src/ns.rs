//! Namespaces and process-level calls.
