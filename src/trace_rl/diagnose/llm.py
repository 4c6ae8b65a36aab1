"""The LLM analyst: discovery and labeling prompts over any `ModelClient`, with schema validation and bounded repair.

Every reply is parsed as JSON and validated (`schema.DiscoveryOutput`, `schema.LabelBatchOutput`). An invalid reply
is answered, in the same conversation, with what was wrong, at most `retries` times; then `AnalystError` is raised and
the stage writes nothing for that step. Labeling keeps the rows that were valid and asks again only for the missing or
incomplete trajectories. Each labeling batch is a fresh conversation; each run shuffles the trajectories with its own
seed (TRACE §3.2: independent labelers with isolated contexts).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic import ValidationError

from trace_rl.artifacts.capabilities import CandidateSpec, DiscoveryOutput, Label, LabelBatchOutput, LabelMatrix
from trace_rl.config.diagnose import DiagnoseConfig
from trace_rl.diagnose import prompts
from trace_rl.diagnose.items import AnalystError, DiagnosisItem, DiscoveryResult, LabelResult
from trace_rl.diagnose.summaries import pack, summarize
from trace_rl.errors import InfraError
from trace_rl.models.base import ModelClient, SamplingParams
from trace_rl.types import Message

T = TypeVar("T")
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S | re.I)
_DECODER = json.JSONDecoder()


def extract_json(text: str) -> Any:
    """The first JSON object in a reply: the whole text, a ``` fenced block, or the first decodable `{...}`."""
    text = (text or "").strip()
    if not text:
        raise ValueError("the reply is empty")
    candidates = [text, *(m.group(1).strip() for m in _FENCE.finditer(text))]
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    for match in re.finditer(r"\{", text):
        try:
            value, _ = _DECODER.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    raise ValueError("the reply contains no JSON object")


def describe_error(exc: Exception) -> str:
    """One short line for a validation error, to send back to the model and to show the user."""
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors()[:4]:
            loc = ".".join(str(p) for p in err["loc"]) or "<root>"
            parts.append(f"{loc}: {err['msg']}")
        return "; ".join(parts)
    return str(exc)


def reply_text(message: Message, raw: str | None) -> str:
    if message.tool_calls and raw:
        return raw  # a client that parsed our JSON as a tool call: use the text it came from
    return message.content or message.thought or raw or ""


class LLMAnalyst:
    """Analyst over a chat model. `evidence` (structural findings table) is added to the discovery prompt."""

    def __init__(
        self, client: ModelClient, cfg: DiagnoseConfig, *, name: str | None = None, evidence: str = ""
    ) -> None:
        self.client = client
        self.cfg = cfg
        self.name = name or getattr(client, "name", "llm")
        self.evidence = evidence

    # -- model access -----------------------------------------------------------------------------------------------
    async def _chat(self, messages: list[Message], temperature: float, seed: int, what: str) -> str:
        sampling = SamplingParams(temperature=temperature, max_tokens=self.cfg.max_tokens, seed=seed)
        try:
            response = await self.client.chat(messages, None, sampling=sampling)
        except InfraError as exc:
            raise AnalystError(f"analyst '{self.name}' failed during {what}: {exc}") from None
        return reply_text(response.message, response.raw_text)

    async def _ask(
        self, messages: list[Message], validate: Callable[[Any], T], *, temperature: float, seed: int, what: str
    ) -> tuple[T, int]:
        """Ask, validate, and on failure tell the model what was wrong; at most 1 + retries calls."""
        error = "no reply"
        for attempt in range(self.cfg.retries + 1):
            text = await self._chat(messages, temperature, seed + attempt, what)
            try:
                return validate(extract_json(text)), attempt + 1
            except (ValueError, ValidationError) as exc:
                error = describe_error(exc)
            messages = [
                *messages,
                Message(role="assistant", content=text or "(empty reply)"),
                Message(role="user", content=prompts.REPAIR.format(error=error)),
            ]
        raise AnalystError(
            f"analyst '{self.name}' gave invalid {what} output {self.cfg.retries + 1} times; last problem: {error}"
        )

    def _summary(self, item: DiagnosisItem, ref: str | None = None) -> str:
        return summarize(
            item,
            ref=ref,
            max_content_chars=self.cfg.max_content_chars,
            max_chars=self.cfg.max_trajectory_chars,
            show_notes=self.cfg.structural_evidence,
        )

    # -- discovery --------------------------------------------------------------------------------------------------
    async def discover(self, items: Sequence[DiagnosisItem], *, seed: int = 0) -> DiscoveryResult:
        rng = random.Random(seed)
        failed = [i for i in items if not i.success]
        passed = [i for i in items if i.success]
        rng.shuffle(failed)
        rng.shuffle(passed)
        order: list[DiagnosisItem] = []
        while failed or passed:  # alternate so both sides are shown when the budget runs out; failures first
            order.extend(x.pop() for x in (failed, passed) if x)
        shown: list[str] = []
        n_pass = n_fail = used = 0
        for item in order:
            text = self._summary(item)
            if shown and used + len(text) + 2 > self.cfg.discovery_char_budget:
                continue
            shown.append(text)
            used += len(text) + 2
            n_pass += item.success
            n_fail += not item.success
        warnings = []
        if len(shown) < len(items):
            warnings.append(f"discovery saw {len(shown)} of {len(items)} trajectories (discovery_char_budget)")
        evidence = (
            prompts.EVIDENCE.format(table=self.evidence) if self.evidence and self.cfg.structural_evidence else ""
        )
        prompt = prompts.DISCOVERY.format(
            n=len(shown),
            n_pass=n_pass,
            n_fail=n_fail,
            max_candidates=self.cfg.max_candidates,
            evidence=evidence,
            summaries="\n\n".join(shown),
        )
        known = {i.task_id for i in items}

        def validate(data: Any) -> list[CandidateSpec]:
            return DiscoveryOutput.model_validate(data).candidates

        messages = [Message(role="system", content=prompts.SYSTEM), Message(role="user", content=prompt)]
        candidates, _ = await self._ask(
            messages, validate, temperature=self.cfg.discovery_temperature, seed=seed, what="discovery"
        )
        if len(candidates) > self.cfg.max_candidates:
            dropped = ", ".join(c.name for c in candidates[self.cfg.max_candidates :])
            keep = self.cfg.max_candidates
            warnings.append(f"discovery proposed {len(candidates)} capabilities; kept {keep}, dropped {dropped}")
            candidates = candidates[: self.cfg.max_candidates]
        for c in candidates:
            unknown = [t for t in c.example_task_ids if t not in known]
            if unknown:
                warnings.append(f"{c.name}: dropped example task ids not among the diagnosed tasks: {unknown}")
                c.example_task_ids = [t for t in c.example_task_ids if t in known]
        return DiscoveryResult(candidates=candidates, warnings=warnings, prompt_chars=len(prompt))

    # -- labeling ---------------------------------------------------------------------------------------------------
    async def label(
        self, items: Sequence[DiagnosisItem], capabilities: Sequence[CandidateSpec], *, run: int = 0, seed: int = 0
    ) -> LabelResult:
        order = list(items)
        random.Random(seed).shuffle(order)
        sizes = [self._summary(item, ref="T000") for item in order]
        batches = pack(sizes, max_items=self.cfg.batch_size, max_chars=self.cfg.char_budget)
        labels: LabelMatrix = {}
        warnings: list[str] = []
        calls = 0
        for b, batch in enumerate(batches):
            got, notes, n = await self._label_batch([order[i] for i in batch], capabilities, run, seed + 1000 * b)
            labels.update(got)
            warnings.extend(notes)
            calls += n
        return LabelResult(labels=labels, warnings=warnings, calls=calls)

    async def _label_batch(
        self, batch: list[DiagnosisItem], capabilities: Sequence[CandidateSpec], run: int, seed: int
    ) -> tuple[LabelMatrix, list[str], int]:
        names = [c.name for c in capabilities]
        refs = {f"T{j + 1}": item for j, item in enumerate(batch)}
        by_id = {item.id: ref for ref, item in refs.items()}
        summaries = "\n\n".join(self._summary(item, ref) for ref, item in refs.items())
        prompt = prompts.LABELING.format(
            dictionary=prompts.dictionary_text(capabilities),
            example=prompts.label_example(capabilities),
            summaries=summaries,
        )
        messages = [Message(role="system", content=prompts.SYSTEM), Message(role="user", content=prompt)]
        done: dict[str, dict[str, Label]] = {}
        warnings: list[str] = []
        error = "no reply"
        for attempt in range(self.cfg.retries + 1):
            text = await self._chat(messages, self.cfg.temperature, seed + attempt, f"labeling run {run}")
            try:
                out = LabelBatchOutput.model_validate(extract_json(text))
            except (ValueError, ValidationError) as exc:
                error = describe_error(exc)
                follow = prompts.REPAIR.format(error=error)
            else:
                problems = []
                for raw_ref, row in out.labels.items():
                    ref = _ref(raw_ref, by_id)
                    if ref not in refs:
                        warnings.append(f"labeling run {run}: ignored labels for unknown trajectory '{raw_ref}'")
                        continue
                    if ref in done:
                        continue
                    missing = [n for n in names if n not in row]
                    unknown = sorted(set(row) - set(names))
                    if missing:
                        extra = f" (unknown names {unknown}: use only the listed names)" if unknown else ""
                        problems.append(f"{ref} lacks {', '.join(missing)}{extra}")
                        continue
                    if unknown:
                        warnings.append(f"labeling run {run}: ignored unknown capabilities {unknown} for {ref}")
                    done[ref] = {n: row[n] for n in names}
                todo = [r for r in refs if r not in done]
                if not todo:
                    break
                absent = [r for r in todo if not any(p.startswith(f"{r} ") for p in problems)]
                if absent:
                    problems.append(f"no labels for {', '.join(absent)}")
                error = "; ".join(problems)
                follow = prompts.MISSING.format(problems=error, refs=", ".join(todo), names=", ".join(names))
            messages = [
                *messages,
                Message(role="assistant", content=text or "(empty reply)"),
                Message(role="user", content=follow),
            ]
        else:
            raise AnalystError(
                f"analyst '{self.name}' labeling run {run}: no complete labels after {self.cfg.retries + 1} "
                f"attempts; last problem: {error}"
            )
        return {refs[r].id: row for r, row in done.items()}, warnings, attempt + 1


def _ref(raw: str, by_id: dict[str, str]) -> str:
    if raw in by_id:
        return by_id[raw]
    m = re.fullmatch(r"\s*t0*(\d+)\s*", raw, re.I)
    return f"T{m.group(1)}" if m else raw


__all__ = ["LLMAnalyst", "describe_error", "extract_json"]
