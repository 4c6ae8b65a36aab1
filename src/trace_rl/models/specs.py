"""Models named on the command line: a config model name, a short spec (`tiny`, `openai:<model>@<url>`, ...) or a
model YAML file, turned into a `ModelConfig` (`model_from_spec`) and added to a config's `models` (`add_model_spec`).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from trace_rl.config import ModelConfig, TraceConfig, format_validation_error, read_yaml
from trace_rl.errors import UserError


def model_from_spec(spec: str, cfg: TraceConfig | None = None) -> tuple[str, ModelConfig]:
    """A model named on the command line: a name from the config's `models`, `scripted`, `tiny`,
    `openai:<model>[@<base_url>]`, `local:<path-or-alias>`, or a bare local folder / alias (smollm2-135m)."""
    if cfg is not None and spec in cfg.models:
        return spec, cfg.models[spec]
    kind, sep, rest = spec.partition(":")
    if spec in ("scripted", "tiny"):
        return spec, ModelConfig(kind=spec, model=spec)
    if sep and kind == "openai":
        model, _, base_url = rest.partition("@")
        if not model:
            raise UserError(f"model spec '{spec}': expected openai:<model>[@<base_url>]")
        return model, ModelConfig(kind="openai", model=model, base_url=base_url or None)
    if sep and kind == "local":
        return rest, ModelConfig(kind="local", model=rest)
    if Path(spec).is_dir():
        if not (Path(spec) / "config.json").is_file():
            raise UserError(f"model folder {spec} is not a model (no config.json in it)")
        return spec, ModelConfig(kind="local", model=spec)
    if spec in ("smollm2-135m",):
        return spec, ModelConfig(kind="local", model=spec)
    known = ", ".join(sorted(cfg.models)) if cfg is not None and cfg.models else "none in config"
    raise UserError(
        f"unknown model '{spec}': use a config model name ({known}), scripted, tiny, smollm2-135m, a local folder, "
        "local:<path>, or openai:<model>[@<base_url>]"
    )


def add_model_spec(cfg: TraceConfig, spec: str) -> str:
    """Put a command-line model (a config name, a spec like `openai:m@url`, or a model YAML file) into `cfg.models`;
    its name there."""
    path = Path(spec)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        try:
            model_cfg = ModelConfig.model_validate(read_yaml(path))
        except ValidationError as err:
            raise UserError(format_validation_error(err, str(path))) from None
        name = path.stem
    else:
        name, model_cfg = model_from_spec(spec, cfg)
    cfg.models[name] = model_cfg
    return name
