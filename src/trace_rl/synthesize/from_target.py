"""Generator 1: capability environments from the target itself (no LLM).

Library (`synthesize.library_tasks`): by default the evidence tasks' families are opened at the decision point the
capability's type decides (`library_decisions`, TRACE's Definition 2: the reward scores that move); `variants`
re-seeds whole tasks of those families (weighted by how many evidence tasks each has) from the library's fresh seed
range, disjoint from its train and test splits (`library_variants`, closer to GRPO on the target). With no usable
evidence, the families whose own capability type matches the capability's are used.

τ²: the evidence train tasks whose gold actions have a supported shape are re-targeted at other users and orders
(`tau2_variants`, see `trace_rl.envs.synthetic.tau2_variants` for the shapes covered), excluding every user and
order the test split refers to (through the environment's hashed leak index).

ToolSandbox: the evidence tasks' train-split families with their augmentations, scored by ToolSandbox's similarity
(`trace_rl.envs.synthetic.toolsandbox_scenarios`).

Imported OpenEnv / verifiers targets: their fresh seeds or rows, scored by the environment's own reward
(`trace_rl.envs.synthetic.target_reseed`); no gold actions, so validation leaves solvability to calibration.

All reuse the target's tools and DB, so schemas match by construction; the first three re-derive gold actions that
validation replays.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from trace_rl.artifacts.environments import EnvSpec, GeneratorSpec, HintSpec, SplitSpec
from trace_rl.config import EnvConfig
from trace_rl.config.synthesize import SynthesizeConfig
from trace_rl.envs.base import Domain
from trace_rl.synthesize.design import decision_reward_spec, hint_spec, reward_spec
from trace_rl.synthesize.evidence import Evidence


def target_family(env_name: str) -> str | None:
    if env_name == "library":
        return "library"
    if env_name.startswith("tau2:") and env_name.split(":", 1)[1] in ("retail", "airline"):
        return "tau2"
    if env_name.startswith("toolsandbox"):
        return "toolsandbox"
    if env_name.startswith(("openenv:", "verifiers:")):
        return "imported"
    return None


def base_spec(
    evidence: Evidence,
    kind: str,
    target_cfg: EnvConfig,
    target: Domain,
    cfg: SynthesizeConfig,
    generator: GeneratorSpec,
) -> EnvSpec:
    env = target.make_env()
    cap = evidence.capability
    return EnvSpec(
        name=cap.name,
        definition=cap.definition,
        target=target_cfg.model_dump(mode="json"),
        tools=[s["function"]["name"] for s in env.tool_schemas()],
        generator=generator,
        reward=reward_spec(kind, alpha=cfg.alpha, weights=cfg.weights, unscored_scale=cfg.unscored_scale),
        hint=hint_spec(kind, cfg.hint_fraction),
        splits=SplitSpec(train=(0, cfg.train_seeds), test=(100_000, cfg.test_seeds)),
        intro="",
        evidence={**evidence.as_dict(), "capability_type": kind},
        provenance={},
    )


def library_generator(evidence: Evidence, kind: str, target_cfg: EnvConfig, cfg: SynthesizeConfig) -> GeneratorSpec:
    from trace_rl.envs.library import CAPABILITY_TYPES
    from trace_rl.envs.library.splits import SplitOptions, fresh_train_seeds

    counts = Counter(str(t.metadata.get("family")) for t in evidence.tasks if t.metadata.get("family"))
    families: dict[str, Any] = {f: n for f, n in counts.items() if f in CAPABILITY_TYPES}
    source = "evidence tasks"
    if not families:
        families = {f: 1 for f, t in CAPABILITY_TYPES.items() if t == kind}
        source = f"families of capability type {kind}"
    options = SplitOptions.model_validate(target_cfg.options or {})
    if cfg.library_tasks == "decisions":
        from trace_rl.envs.synthetic.library_decisions import DECISIONS, decisions_for

        if evidence.capability.name in DECISIONS:  # the probe analyzer names capabilities after their decisions
            decisions, how = {evidence.capability.name: 1.0}, "the decision the capability is named after"
        else:
            decisions, how = decisions_for(kind, families)
        return GeneratorSpec(
            kind="library_decisions",
            params={"decisions": decisions, "decisions_from": how, "families": families, "families_from": source},
            difficulty=cfg.initial_difficulty,
            seed_base=fresh_train_seeds(1, options=options)[0],
        )
    return GeneratorSpec(
        kind="library_variants",
        params={"families": families, "families_from": source},
        difficulty=cfg.initial_difficulty,
        seed_base=fresh_train_seeds(1, options=options)[0],
    )


def decision_hint(generator: GeneratorSpec, hint: HintSpec) -> HintSpec:
    """A decision environment of one decision hints that decision's right move (the capability type's generic hint
    is about another move: a confirmation environment hinted to read records field by field)."""
    from trace_rl.envs.synthetic.library_decisions import DECISIONS

    names = list(generator.params.get("decisions", {}))
    if len(names) != 1 or not DECISIONS[names[0]].hint:
        return hint
    return hint.model_copy(update={"text": DECISIONS[names[0]].hint})


def tau2_generator(evidence: Evidence, cfg: SynthesizeConfig, target: Domain) -> GeneratorSpec | None:
    from trace_rl.envs.synthetic.tau2_variants import supported_shape

    env = target.make_env()
    sources = [t.id for t in evidence.tasks if supported_shape(t, env)]
    if not sources:
        return None
    return GeneratorSpec(
        kind="tau2_variants",
        params={"sources": sources, "tries": cfg.tau2_tries},
        difficulty=cfg.initial_difficulty,
        seed_base=0,
    )


def toolsandbox_generator(evidence: Evidence, cfg: SynthesizeConfig) -> GeneratorSpec | None:
    """The evidence tasks' families (train side of the family split only: test families never enter)."""
    from trace_rl.envs.toolsandbox.domain import family_split

    counts = Counter(str(t.metadata.get("family")) for t in evidence.tasks if t.metadata.get("family"))
    families = sorted(f for f in counts if family_split(f) == "train")
    if not families:
        return None
    return GeneratorSpec(
        kind="toolsandbox_scenarios",
        params={
            "families": families,
            "evidence_counts": {f: counts[f] for f in families},
            # ToolSandbox's own scenario categories of the evidence (canonicalization, insufficient information,
            # state dependency, multiple user turns, ...): which of its axes this environment exercises
            "evidence_categories": dict(
                Counter(str(c) for t in evidence.tasks for c in t.metadata.get("categories") or []).most_common()
            ),
        },
        difficulty=cfg.initial_difficulty,
        seed_base=0,
    )


def reseed_generator(cfg: SynthesizeConfig, target: Domain) -> GeneratorSpec | None:
    """An imported target's fresh seeds (OpenEnv) or rows (verifiers), where it has any."""
    from trace_rl.envs.base import ReseedableDomain

    if not isinstance(target, ReseedableDomain):
        return None
    count = target.fresh_count()
    if count is not None and count <= 0:
        return None
    return GeneratorSpec(
        kind="target_reseed",
        params={"fresh_tasks": "unbounded" if count is None else count},
        difficulty=cfg.initial_difficulty,
        seed_base=0,
    )


def target_spec(
    evidence: Evidence,
    kind: str,
    target_cfg: EnvConfig,
    target: Domain,
    cfg: SynthesizeConfig,
) -> tuple[EnvSpec | None, str]:
    """The spec of a from-target environment, or (None, why not)."""
    family = target_family(target_cfg.name)
    if family == "library":
        gen = library_generator(evidence, kind, target_cfg, cfg)
    elif family == "tau2":
        gen = tau2_generator(evidence, cfg, target)
        if gen is None:
            return None, "no evidence task has a τ² shape the variant generator covers"
    elif family == "toolsandbox":
        gen = toolsandbox_generator(evidence, cfg)
        if gen is None:
            return None, "no evidence task belongs to a train-split ToolSandbox family"
    elif family == "imported":
        gen = reseed_generator(cfg, target)
        if gen is None:
            return None, f"target '{target_cfg.name}' has no fresh seeds or rows beyond its train and test splits"
    else:
        return None, f"target '{target_cfg.name}' has no from-target generator"
    spec = base_spec(evidence, kind, target_cfg, target, cfg, gen)
    if family in ("toolsandbox", "imported"):  # whole target tasks: the target's own score is the reward
        spec.reward = spec.reward.model_copy(update={"source": "target"})
    if gen.kind == "library_decisions":
        spec.reward = decision_reward_spec()
        spec.hint = decision_hint(gen, spec.hint)
    spec.provenance = {"generator": "target", "kind": gen.kind}
    return spec, ""


__all__ = ["reseed_generator", "target_family", "target_spec"]
