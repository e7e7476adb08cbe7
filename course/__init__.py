"""Course plumbing that is not part of the engine (hand-written)."""
