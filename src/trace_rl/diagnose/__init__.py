"""Diagnose (TRACE stage 1b): find the capabilities the agent lacks by contrasting successful and failed rollouts.

discovery (a capability dictionary, once) → N independent labeling runs (NA / PRESENT / LACKING per trajectory and
capability) → ER±, Δ, Cov per run and the K-of-N rule (`aggregate.py`) → `diagnose/capabilities.json`.
Analysts: the reference-guided `structural` analyzer (no LLM, default) or any chat model (`llm.py`).
"""
