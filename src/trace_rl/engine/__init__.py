"""The one conversation engine: the episode state machine (`episode`) with a text driver (`text_driver`, a
`ModelClient`) and a token driver (`token_driver`, a `TurnSampler` over `chat_codec`), the one prompt assembler
(`prompt`), the rollout runner that keeps many episodes in flight (`runner`), and what a rollout plans (`plan`)."""
