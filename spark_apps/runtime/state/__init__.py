"""A slot's state read back: digests and state checks for the upgrade's gates, invariant checks, the
state image, the TTL count."""
