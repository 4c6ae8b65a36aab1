"""Stage 4 of TRACE: route each task to one adapter, with the frozen base model as the classifier (TRACE §3.5)."""
