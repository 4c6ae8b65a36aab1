"""trace-rl: TRACE (Kang et al. 2026, arXiv 2604.05336) as reproducible commands.

Roll out an agent, diagnose the capabilities it lacks, synthesize one training environment per capability,
train one LoRA adapter each with GRPO, and route every task to the right adapter.
"""

__version__ = "0.1.0"
