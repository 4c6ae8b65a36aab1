"""The LLM analyst: discovery and labeling prompts over any `ModelClient`, with schema validation and bounded repair.

Prompts show the agent's policy once, then trajectories with the user's goal and whole tool results (`chunks.py`),
fitted to the analyst's context (`budget.py`): a trajectory that does not fit is labelled in parts, and a prompt whose
fixed part (instructions, policy, dictionary, one trajectory's header and goal) cannot fit is refused with one line
before any model call. Every reply is parsed as JSON and validated (`DiscoveryOutput`, `LabelBatchOutput`). An invalid
reply is answered, in the same conversation (older exchanges dropped when they no longer fit), with what was wrong, at
most `retries` times. Labeling keeps the rows that were valid and asks again only for the missing ones; a batch that
stays invalid leaves its trajectories unlabelled in that run (data: a warning, `LabelResult.failed`), unless more than
half of the run's trajectories fail, which raises `AnalystError` (one line). A client that fails (InfraError other than
a context overflow, a scripted model out of responses) raises `AnalystError` at once; so does invalid discovery output.
Each labeling batch is a fresh conversation; each run shuffles the trajectories with its own seed (TRACE §3.2:
independent labelers with isolated contexts).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from pydantic import ValidationError

from trace_rl.artifacts.capabilities import CandidateSpec, DiscoveryOutput, Label, LabelBatchOutput, LabelMatrix
from trace_rl.config.diagnose import DiagnoseConfig
from trace_rl.diagnose import prompts
from trace_rl.diagnose.budget import CHARS_PER_TOKEN, PER_MESSAGE, Budget, budget_for
from trace_rl.diagnose.chunks import Unit, combine, policy_of, split_units
from trace_rl.diagnose.items import AnalystError, DiagnosisItem, DiscoveryResult, LabelResult
from trace_rl.diagnose.summaries import pack, truncate
from trace_rl.errors import InfraError, UserError
from trace_rl.models.base import ModelClient, SamplingParams
from trace_rl.models.scripted import ScriptExhaustedError
from trace_rl.types import Message

T = TypeVar("T")
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S | re.I)
_DECODER = json.JSONDecoder()
MIN_EVENTS_TOKENS = 32  # a part must hold at least this much of the conversation besides its header and goal
REPLY_SHOWN_TOKENS = 512  # a bad reply is shown back to the model cut to this
_CUT = " …[reply cut]"
TOKENS_PER_LABEL = 12  # reply size of one label ("name": "PRESENT", ...) when capping a batch


class ClientFailure(AnalystError):
    """The analyst's model client failed (not its output): systemic, the run stops."""


@dataclass
class PlannedPrompt:
    """One prompt the analyst would send: its name, messages, counted tokens, and the units it labels."""

    name: str
    messages: list[Message]
    tokens: int
    budget: Budget
    units: list[Unit] = field(default_factory=list)


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
        self._budget: Budget | None = None

    async def budget(self) -> Budget:
        if self._budget is None:
            self._budget = await budget_for(self.client, self.cfg)
        return self._budget

    # -- model access -----------------------------------------------------------------------------------------------
    async def _chat(self, messages: list[Message], budget: Budget, temperature: float, seed: int, what: str) -> str:
        used = budget.messages_tokens(messages)
        if used > budget.prompt_room:  # planned prompts fit; this guards the repair turns
            raise AnalystError(
                f"analyst '{self.name}': the {what} prompt of {used:,} tokens does not fit: {budget.describe()}"
            )
        max_tokens = max(1, min(self.cfg.max_tokens, budget.context - used))
        sampling = SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed)
        try:
            response = await self.client.chat(messages, None, sampling=sampling)
        except InfraError as exc:
            if exc.kind == "context_length":
                raise AnalystError(f"analyst '{self.name}' failed during {what}: {exc}") from None
            raise ClientFailure(f"analyst '{self.name}' failed during {what}: {exc}") from None
        except ScriptExhaustedError as exc:
            hint = "; give the scripted model a `script:` under `models` in --config" if "after 0" in str(exc) else ""
            raise ClientFailure(f"analyst '{self.name}' failed during {what}: {exc}{hint}") from None
        return reply_text(response.message, response.raw_text)

    def _follow_up(self, base: list[Message], exchanges: list[tuple[str, str]], budget: Budget) -> list[Message]:
        """The conversation with the latest exchanges (bad reply, what was wrong) that fit, newest kept first."""
        room = budget.prompt_room - budget.messages_tokens(base)
        kept: list[Message] = []
        for reply, follow in reversed(exchanges):
            need = budget.count(follow) + 2 * PER_MESSAGE
            text = reply or "(empty reply)"
            limit = min(REPLY_SHOWN_TOKENS, room - need)
            shown = text if budget.count(text) <= limit else budget.fit_chars(text, limit - budget.count(_CUT) - 1)
            if len(shown) < len(text):
                shown = (shown + _CUT) if shown else "(reply omitted: too long)"
            need += budget.count(shown)
            if kept and need > room:
                break
            kept = [Message(role="assistant", content=shown), Message(role="user", content=follow), *kept]
            room -= need
        return [*base, *kept]

    async def _ask(
        self, planned: PlannedPrompt, validate: Callable[[Any], T], *, temperature: float, seed: int, what: str
    ) -> tuple[T, int]:
        """Ask, validate, and on failure tell the model what was wrong; at most 1 + retries calls."""
        error = "no reply"
        exchanges: list[tuple[str, str]] = []
        messages = current = planned.messages
        for attempt in range(self.cfg.retries + 1):
            text = await self._chat(current, planned.budget, temperature, seed + attempt, what)
            try:
                return validate(extract_json(text)), attempt + 1
            except (ValueError, ValidationError) as exc:
                error = describe_error(exc)
            exchanges.append((text, prompts.REPAIR.format(error=error)))
            current = self._follow_up(messages, exchanges, planned.budget)
        raise AnalystError(
            f"analyst '{self.name}' gave invalid {what} output {self.cfg.retries + 1} times; last problem: {error}"
        )

    # -- prompts (also shown by `diagnose --show-prompts`) ----------------------------------------------------------
    def _unit_room(self, budget: Budget, fixed: str, items: Sequence[DiagnosisItem], what: str, cap_chars: int) -> int:
        """Tokens left for trajectories next to `fixed`; refused (one line) when one trajectory's header, goal and a
        little of its conversation cannot fit."""
        margin = min(256, budget.prompt_room // 16)  # for the repair turns
        room = budget.prompt_room - budget.count(fixed) - 2 * PER_MESSAGE - margin
        bare = max((budget.count(Unit(i, 0, 1, [], 0, 0).text("T000")) for i in items), default=0)
        if room < bare + MIN_EVENTS_TOKENS:
            raise UserError(
                f"diagnose: analyst '{self.name}' cannot fit its {what} prompt: the fixed part (instructions, policy"
                f"{', dictionary' if what == 'labeling' else ''}) takes {budget.count(fixed):,} tokens and one "
                f"trajectory's header and goal up to {bare:,} more, but {budget.describe()}; use an analyst with a "
                "longer context or a smaller diagnose.max_tokens"
            )
        return min(room, int(cap_chars / CHARS_PER_TOKEN))

    def _policy(self, items: Sequence[DiagnosisItem]) -> str:
        return "\n\n".join(dict.fromkeys(p for p in (policy_of(i) for i in items) if p))

    def _discovery_text(self, items: Sequence[DiagnosisItem], shown: list[str], n_pass: int, n_fail: int) -> str:
        evidence = (
            prompts.EVIDENCE.format(table=self.evidence) if self.evidence and self.cfg.structural_evidence else ""
        )
        return prompts.DISCOVERY.format(
            n=len(shown),
            n_pass=n_pass,
            n_fail=n_fail,
            max_candidates=self.cfg.max_candidates,
            evidence=evidence,
            policy=prompts.policy_section(self._policy(items)),
            summaries="\n\n".join(shown),
        )

    def _labeling_text(self, capabilities: Sequence[CandidateSpec], policy: str, units: Sequence[str]) -> str:
        return prompts.LABELING.format(
            dictionary=prompts.dictionary_text(capabilities),
            example=prompts.label_example(capabilities),
            policy=prompts.policy_section(policy),
            summaries="\n\n".join(units),
        )

    async def check_fits(self, items: Sequence[DiagnosisItem]) -> None:
        """Refuse, before any model call, prompts that cannot fit (labeling checked without its dictionary)."""
        budget = await self.budget()
        fixed = prompts.SYSTEM + self._discovery_text(items, [], 0, 0)
        self._unit_room(budget, fixed, items, "discovery", self.cfg.discovery_char_budget)
        for policy, group in _by_policy(items).items():
            self._unit_room(budget, prompts.SYSTEM + self._labeling_text([], policy, []), group, "labeling", 10**9)

    async def discovery_prompt(
        self, items: Sequence[DiagnosisItem], *, seed: int = 0
    ) -> tuple[PlannedPrompt, list[str]]:
        budget = await self.budget()
        rng = random.Random(seed)
        failed = [i for i in items if not i.success]
        passed = [i for i in items if i.success]
        rng.shuffle(failed)
        rng.shuffle(passed)
        order: list[DiagnosisItem] = []
        while failed or passed:  # alternate so both sides are shown when the budget runs out; failures first
            order.extend(x.pop() for x in (failed, passed) if x)
        fixed = prompts.SYSTEM + self._discovery_text(items, [], 0, 0)
        room = self._unit_room(budget, fixed, items, "discovery", self.cfg.discovery_char_budget)
        per_item = min(room, int(self.cfg.max_trajectory_chars / CHARS_PER_TOKEN))
        shown: list[str] = []
        n_pass = n_fail = used = cut = 0
        for item in order:
            units = split_units(item, per_item, budget.count, max_content_chars=self.cfg.max_content_chars)
            text = units[0].text(None)
            if len(units) > 1:
                text += f"\n[… events {units[1].first + 1}–{units[0].total} not shown here]"
            n = budget.count(text) + 2
            if used + n > room:
                continue
            cut += len(units) > 1
            shown.append(text)
            used += n
            n_pass += item.success
            n_fail += not item.success
        warnings = []
        if len(shown) < len(items):
            warnings.append(f"discovery saw {len(shown)} of {len(items)} trajectories (analyst context / budget)")
        if cut:
            warnings.append(f"discovery saw only the first part of {cut} long trajectories (max_trajectory_chars)")
        text = self._discovery_text(items, shown, n_pass, n_fail)
        messages = [Message(role="system", content=prompts.SYSTEM), Message(role="user", content=text)]
        return PlannedPrompt("discovery", messages, budget.messages_tokens(messages), budget), warnings

    async def label_prompts(
        self, items: Sequence[DiagnosisItem], capabilities: Sequence[CandidateSpec], *, seed: int = 0
    ) -> list[PlannedPrompt]:
        """One labeling run's batches: shuffled units (whole trajectories or parts), packed to the budget."""
        per_reply = len(capabilities) * TOKENS_PER_LABEL + 8
        full = await self.budget()  # a labeling reply needs only its batch's labels: the rest goes to the prompt
        budget = replace(full, completion=max(1, min(full.completion, self.cfg.batch_size * per_reply + 64)))
        order = list(items)
        random.Random(seed).shuffle(order)
        max_items = max(1, min(self.cfg.batch_size, (budget.completion - 16) // per_reply))
        planned: list[PlannedPrompt] = []
        for policy, group in _by_policy(order).items():
            fixed = prompts.SYSTEM + self._labeling_text(capabilities, policy, [])
            room = self._unit_room(budget, fixed, group, "labeling", self.cfg.char_budget)
            units = [
                u
                for item in group
                for u in split_units(item, room, budget.count, max_content_chars=self.cfg.max_content_chars)
            ]
            texts = [u.text("T000") for u in units]
            for batch in pack(texts, max_items=max_items, max_chars=room, size=budget.count):
                chosen = [units[i] for i in batch]
                text = self._labeling_text(capabilities, policy, [u.text(f"T{j + 1}") for j, u in enumerate(chosen)])
                messages = [Message(role="system", content=prompts.SYSTEM), Message(role="user", content=text)]
                name = f"label_batch_{len(planned)}"
                planned.append(PlannedPrompt(name, messages, budget.messages_tokens(messages), budget, chosen))
        return planned

    # -- discovery --------------------------------------------------------------------------------------------------
    async def discover(self, items: Sequence[DiagnosisItem], *, seed: int = 0) -> DiscoveryResult:
        await self.check_fits(items)
        planned, warnings = await self.discovery_prompt(items, seed=seed)
        known = {i.task_id for i in items}

        def validate(data: Any) -> list[CandidateSpec]:
            return DiscoveryOutput.model_validate(data).candidates

        candidates, _ = await self._ask(
            planned, validate, temperature=self.cfg.discovery_temperature, seed=seed, what="discovery"
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
        return DiscoveryResult(candidates=candidates, warnings=warnings, prompt_chars=len(planned.messages[1].text))

    # -- labeling ---------------------------------------------------------------------------------------------------
    async def label(
        self, items: Sequence[DiagnosisItem], capabilities: Sequence[CandidateSpec], *, run: int = 0, seed: int = 0
    ) -> LabelResult:
        batches = await self.label_prompts(items, capabilities, seed=seed)
        names = [c.name for c in capabilities]
        parts: dict[str, list[dict[str, Label]]] = {}
        failed: dict[str, str] = {}
        warnings: list[str] = []
        calls = 0
        for b, planned in enumerate(batches):
            try:
                got, notes, n = await self._label_batch(planned, names, run, seed + 1000 * b)
            except ClientFailure:
                raise
            except AnalystError as exc:
                failed.update({u.item.id: str(exc) for u in planned.units})
                calls += self.cfg.retries + 1
                continue
            for unit, row in zip(planned.units, got, strict=True):
                parts.setdefault(unit.item.id, []).append(row)
            warnings.extend(notes)
            calls += n
        labels: LabelMatrix = {}
        for item in items:
            rows = parts.get(item.id, [])
            if item.id in failed or not rows:
                continue
            labels[item.id] = {n: combine([r[n] for r in rows]) for n in names}
        lost = [i.id for i in items if i.id not in labels]
        if lost:
            last = next(iter(failed.values()), "no labels")
            if 2 * len(lost) > len(items):
                raise AnalystError(
                    f"{last} ({len(lost)} of {len(items)} trajectories unlabelled in labeling run {run})"
                )
            warnings.append(
                f"labeling run {run}: {len(lost)} trajectories left unlabelled (counted NA in this run; a rerun "
                f"redoes the run): {', '.join(lost[:5])}; last problem: {last}"
            )
        return LabelResult(labels=labels, warnings=warnings, calls=calls, failed=lost)

    async def _label_batch(
        self, planned: PlannedPrompt, names: list[str], run: int, seed: int
    ) -> tuple[list[dict[str, Label]], list[str], int]:
        refs = {f"T{j + 1}": unit for j, unit in enumerate(planned.units)}
        by_id = {unit.item.id: ref for ref, unit in refs.items() if unit.parts == 1}
        base = planned.messages
        messages = base
        exchanges: list[tuple[str, str]] = []
        done: dict[str, dict[str, Label]] = {}
        warnings: list[str] = []
        error = "no reply"
        for attempt in range(self.cfg.retries + 1):
            text = await self._chat(
                messages, planned.budget, self.cfg.temperature, seed + attempt, f"labeling run {run}"
            )
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
                follow = prompts.MISSING.format(
                    problems=truncate(error, 600), refs=", ".join(todo), names=", ".join(names)
                )
            exchanges.append((text, follow))
            messages = self._follow_up(base, exchanges, planned.budget)
        else:
            raise AnalystError(
                f"analyst '{self.name}' labeling run {run}: no complete labels after {self.cfg.retries + 1} "
                f"attempts; last problem: {error}"
            )
        return [done[r] for r in refs], warnings, attempt + 1


def _by_policy(items: Sequence[DiagnosisItem]) -> dict[str, list[DiagnosisItem]]:
    groups: dict[str, list[DiagnosisItem]] = {}
    for item in items:
        groups.setdefault(policy_of(item), []).append(item)
    return groups


def _ref(raw: str, by_id: dict[str, str]) -> str:
    if raw in by_id:
        return by_id[raw]
    m = re.fullmatch(r"\s*t0*(\d+)\s*", raw, re.I)
    return f"T{m.group(1)}" if m else raw


__all__ = ["ClientFailure", "LLMAnalyst", "PlannedPrompt", "describe_error", "extract_json"]
