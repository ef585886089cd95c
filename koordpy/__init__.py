"""koordpy: Koordinator-compatible node agent and slim controller for GPU/NPU clusters."""

__version__ = "0.1.0"
