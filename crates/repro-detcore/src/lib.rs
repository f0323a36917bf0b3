//! The DeterminismController: logical clock, entropy stream, pinned identity, directory order.
//! Pure logic, no kernel mechanism.
