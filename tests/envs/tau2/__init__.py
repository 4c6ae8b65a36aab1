"""τ² environment tests (data-dependent ones skip when the τ² data directory is absent)."""
