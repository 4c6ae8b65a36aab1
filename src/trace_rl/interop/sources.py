"""What `trace-rl export env <source>` can export, and how an exported environment rebuilds it.

A source is a synthesized capability environment (a run's `envs/<capability>/` folder), a library task family
(`library:<family>`, the stand-in capability environment training uses), or any registered target's task split
(`library`, `tau2:airline`, `toolsandbox:base_offline`, ...; seed s plays task s mod n). `SourceRef` is the recipe,
written into the exported package as `source.json`: `load()` returns the same `EpisodeSource` (tasks by seed,
environment, user, scorer) that trace-rl trains and evaluates with, and `seeds(split)` its seed ranges.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from trace_rl.artifacts.environments import read_env_spec
from trace_rl.artifacts.layout import EnvLayout
from trace_rl.config import EnvConfig
from trace_rl.engine.token_driver import EpisodeSource
from trace_rl.envs.registry import load_domain
from trace_rl.envs.synthetic import load_train_env
from trace_rl.errors import UserError
from trace_rl.training.envs import DomainTrainEnv, library_family_env


class SourceRef(BaseModel):
    """A recipe for an `EpisodeSource`: `kind` says which of the three sources, the other fields where it is."""

    kind: Literal["capability", "library_family", "domain"]
    name: str = Field(description="The environment's name (capability, family or domain name).")
    folder: str | None = Field(None, description="capability: the environment folder (relative to `base`).")
    family: str | None = None
    domain: str | None = Field(None, description="domain: the registry name, e.g. tau2:airline.")
    split: str = Field("train", description="domain: the split whose tasks the seeds index.")

    def load(self, base: Path | None = None) -> EpisodeSource:
        if self.kind == "capability":
            assert self.folder is not None
            folder = Path(self.folder)
            return load_train_env(folder if folder.is_absolute() or base is None else Path(base) / folder)
        if self.kind == "library_family":
            assert self.family is not None
            return library_family_env(self.family)
        assert self.domain is not None
        domain = load_domain(self.domain, EnvConfig(name=self.domain))
        tasks = domain.tasks(self.split)
        if not tasks:
            raise UserError(f"environment '{self.domain}' has no tasks in split '{self.split}'")
        return DomainTrainEnv(
            self.name,
            domain,
            lambda seed: tasks[seed % len(tasks)],
            render_tools=not getattr(domain, "prompt_lists_tools", False),
            train_seeds=list(range(len(tasks))),
        )

    def seeds(self, base: Path | None = None) -> dict[str, list[int]]:
        """The seeds of each split the source offers (a capability environment's disjoint train/test ranges)."""
        source = self.load(base)
        if self.kind == "capability":
            spec = source.env.spec  # type: ignore[attr-defined]
            return {split: list(spec.splits.seeds(split)) for split in ("train", "test")}
        out = {"train": list(getattr(source, "train_seeds", None) or [])}
        test = getattr(source, "test_seeds", None)
        if test:
            out["test"] = list(test)
        return out


def resolve_source(text: str, *, split: str = "train") -> SourceRef:
    """`text` as a source: a capability environment folder, `library:<family>`, or a registered environment name."""
    path = Path(text)
    if path.is_dir():
        layout = EnvLayout(path)
        if not layout.spec.is_file():
            raise UserError(f"{path} is not a capability environment folder (no {layout.spec.name})")
        spec = read_env_spec(layout)
        return SourceRef(kind="capability", name=spec.name, folder=str(path.resolve()))
    prefix, _, rest = text.partition(":")
    if prefix == "library" and rest:
        library_family_env(rest)  # validates the family (UserError naming the known ones)
        return SourceRef(kind="library_family", name=rest, family=rest)
    domain = load_domain(text, EnvConfig(name=text))  # UserError for an unknown environment
    if split not in domain.splits():
        raise UserError(f"environment '{text}' has no split '{split}' (splits: {', '.join(domain.splits())})")
    return SourceRef(kind="domain", name=text.replace(":", "_"), domain=text, split=split)


__all__ = ["SourceRef", "resolve_source"]
