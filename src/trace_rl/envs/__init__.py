"""Environments: the protocol, toolkit, user simulators, evaluator, and one folder per domain."""
