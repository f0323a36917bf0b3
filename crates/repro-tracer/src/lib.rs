//! The transport that carries the guest's mediated syscalls to the DeterminismController.
