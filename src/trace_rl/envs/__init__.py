"""Environments: the protocol, toolkit, orchestrator, user simulators, evaluator, and one folder per domain."""
