"""The token-in/token-out episode loop: prefix invariant, env_mask, no re-tokenization, template checks, hints."""

from __future__ import annotations

import pytest
from tests.training.train_toy import BLUE, DONE, RED, ScriptedSampler, ToyEnv, alternating

from trace_rl.engine.chat_codec import PrefixError, check_prefix_preserving
from trace_rl.engine.episode import EpisodeLimits
from trace_rl.engine.token_driver import EpisodeRequest, EpisodeRunner
from trace_rl.types import TerminationReason


def run(codec, tokenizer, requests, choose=None, env=None, limits=None):
    sampler = ScriptedSampler(tokenizer, choose or alternating(tokenizer))
    runner = EpisodeRunner(env or ToyEnv(), codec, limits or EpisodeLimits(max_turn_tokens=64, max_episode_tokens=512))
    return runner.run(requests, sampler), sampler


def test_turn_prefix_invariant_and_env_mask(codec, tokenizer):
    results, sampler = run(codec, tokenizer, [EpisodeRequest(seed=s) for s in (1, 1, 2, 3)])
    assert [r.success for r in results] == [True, False, True, False]  # red, blue, red, blue
    for res in results:
        assert res.termination == TerminationReason.USER_STOP and len(res.turns) == 2
        # each turn's prompt + completion is a prefix of the next turn's prompt
        for turn, nxt in zip(res.turns, res.turns[1:], strict=False):
            seq = turn.prompt_ids + turn.completion_ids
            assert nxt.prompt_ids[: len(seq)] == seq
        # the returned sequence is exactly what the model saw, token for token
        last = res.turns[-1]
        assert res.prompt_ids + res.completion_ids == last.prompt_ids + last.completion_ids
        assert res.turns[0].prompt_ids == res.prompt_ids
        # env_mask: 1 exactly on the sampled ids, 0 on the environment's tokens in between
        assert len(res.env_mask) == len(res.completion_ids) == len(res.logprobs)
        sampled = [t for turn in res.turns for t in turn.completion_ids]
        assert [t for t, m in zip(res.completion_ids, res.env_mask, strict=True) if m] == sampled
        env_text = tokenizer.decode([t for t, m in zip(res.completion_ids, res.env_mask, strict=True) if not m])
        assert "picked" in env_text and "<|im_start|>tool" in env_text and env_text.endswith("<|im_start|>assistant\n")
        assert res.env_mask[0] == 1 and res.env_mask[-1] == 1  # starts and ends with the model's own tokens
    # the sampler was fed exactly those contexts
    assert sampler.contexts[0] == results[0].prompt_ids


def test_sampled_ids_are_never_retokenized(codec, tokenizer):
    """A non-canonical tokenization (one id per character) survives as sampled, though re-encoding would differ."""
    char_ids = [tokenizer.convert_tokens_to_ids(c) for c in "Done"]
    assert None not in char_ids and tokenizer.decode(char_ids) == "Done"
    assert tokenizer("Done", add_special_tokens=False)["input_ids"] != char_ids

    def choose(ctx, call):
        return char_ids if "picked" in tokenizer.decode(ctx[-40:]) else RED

    (res,), _ = run(codec, tokenizer, [EpisodeRequest(seed=5)], choose=choose)
    assert res.turns[-1].completion_ids[:-1] == char_ids
    assert res.completion_ids[-len(char_ids) - 1 : -1] == char_ids
    assert res.messages[-2].content == "Done"  # parsed from the decoded ids, used only for the environment


def test_truncated_turn_gets_closed_by_masked_tokens(codec, tokenizer):
    long = RED + " " + "word " * 80

    def choose(ctx, call):
        return DONE if "picked" in tokenizer.decode(ctx[-40:]) else long

    limits = EpisodeLimits(max_turn_tokens=30, max_episode_tokens=512)
    (res,), _ = run(codec, tokenizer, [EpisodeRequest(seed=1)], choose=choose, limits=limits)
    first = res.turns[0].completion_ids
    assert len(first) == 30 and first[-1] != tokenizer.convert_tokens_to_ids("<|im_end|>")
    bridge = res.completion_ids[len(first) : len(first) + 2]
    assert tokenizer.decode(bridge[:1]) == "<|im_end|>" and res.env_mask[len(first)] == 0


def test_max_turns_ends_the_episode(codec, tokenizer):
    (res,), _ = run(
        codec,
        tokenizer,
        [EpisodeRequest(seed=1)],
        choose=lambda ctx, call: BLUE,
        limits=EpisodeLimits(max_turn_tokens=64, max_episode_tokens=512, max_turns=1),
    )
    assert res.termination == TerminationReason.MAX_STEPS and res.reward == 0.0 and len(res.turns) == 1


def test_hinted_episode_returns_base_prompt(codec, tokenizer):
    env = ToyEnv(hint="red is usually right")
    (plain, hinted), _ = run(codec, tokenizer, [EpisodeRequest(seed=4), EpisodeRequest(seed=4, hinted=True)], env=env)
    assert "red is usually right" in tokenizer.decode(hinted.prompt_ids)
    assert "red is usually right" in tokenizer.decode(hinted.turns[0].prompt_ids)
    assert hinted.base_prompt_ids == plain.prompt_ids == plain.base_prompt_ids
    assert "red is usually right" not in tokenizer.decode(hinted.base_prompt_ids)


def test_prefix_check_accepts_chatml_and_refuses_rewriting_template(tokenizer):
    from transformers import AutoTokenizer

    from trace_rl.engine.chat_codec import ChatCodec

    check_prefix_preserving(ChatCodec(tokenizer))
    bad = AutoTokenizer.from_pretrained(tokenizer.name_or_path)
    # drops the content of every assistant turn but the last (like templates that strip past reasoning)
    bad.chat_template = (
        "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' }}"
        "{%- if m.role != 'assistant' or loop.last %}{{- m.content }}{%- endif %}{{- '<|im_end|>\\n' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )
    with pytest.raises(PrefixError):
        check_prefix_preserving(ChatCodec(bad))
