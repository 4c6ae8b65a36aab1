"""Test support shipped with the package: deterministic agents and users (`playback.py`) for the τ² smoke tests, the
conformance vectors and the engine benchmark. trace-rl's own commands never import it (an import contract checks).
"""
