"""The synapse on-disk format (docs/FORMAT.md): stdlib + numpy only, no models, no numba."""
