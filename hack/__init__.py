"""Developer tooling that is not part of koordpy itself (builds and test clusters)."""
