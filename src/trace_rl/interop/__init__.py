"""The field's formats: trace-rl environments exported as OpenEnv and verifiers environments (driven one agent
message at a time by `EpisodeSession`, rebuilt from a `SourceRef`), and run records as Hugging Face datasets."""
