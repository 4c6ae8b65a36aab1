"""Routers that pick one adapter (or the base model) for a task from its first user message (TRACE §3.5), and the
routing prompt they score."""
