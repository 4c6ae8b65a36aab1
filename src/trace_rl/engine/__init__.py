"""The one conversation engine: the episode state machine with a text driver (a `ModelClient`) and a token driver
(a `TurnSampler`), the rollout runner that keeps many episodes in flight, and what a rollout plans."""
