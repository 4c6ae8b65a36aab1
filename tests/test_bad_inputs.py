"""Bad input never crashes or lies: a table of bad inputs, each run through the real CLI (`trace_rl.cli.app.main`).

The contract for every row: exit code 2, exactly one line on stderr, that line names what is wrong (a substring the
row gives: the file, the option or the field), no traceback, and nothing that was already written is lost (every
file that existed before the command still exists with the same bytes; the manifest may gain a command line but
must still parse and keep its earlier commands). The table is README's "bad inputs" count (docs/bad-inputs.md).
"""

from __future__ import annotations

import json
import shutil
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from trace_rl.cli.app import main
from trace_rl.types import Trajectory

from .report.synthetic import build_synthetic_run

Setup = Callable[[Path, Path], list[str]]  # (tmp folder, a fresh copy of the synthetic run) -> argv


@dataclass(frozen=True)
class Bad:
    id: str
    setup: Setup
    names: str  # a substring the one stderr line must contain (case-insensitive)


def _write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def cfg(text: str | bytes, *extra: str, command: str = "run") -> Setup:
    """`trace-rl <command> --config <a file holding text> <extra...>`."""

    def setup(tmp: Path, run: Path) -> list[str]:
        path = _write(tmp / "c.yaml", text if isinstance(text, bytes) else text.replace("{TMP}", str(tmp)))
        run_opt = [] if command == "run" else ["--run", str(tmp / "fresh")]
        return [command, "--config", str(path), *run_opt, *extra]

    return setup


def rollout(*extra: str) -> Setup:
    """`trace-rl rollout --env library --model scripted --run <tmp>/r <extra...>` on a fresh run directory."""

    def setup(tmp: Path, run: Path) -> list[str]:
        return ["rollout", "--env", "library", "--model", "scripted", "--run", str(tmp / "r"), *extra]

    return setup


def on_run(*argv: str, corrupt: Callable[[Path], None] | None = None) -> Setup:
    """A command on the synthetic run (`{RUN}` in argv is its path), after `corrupt(run)` spoiled one of its files."""

    def setup(tmp: Path, run: Path) -> list[str]:
        if corrupt is not None:
            corrupt(run)
        return [a.replace("{RUN}", str(run)).replace("{TMP}", str(tmp)) for a in argv]

    return setup


def replace_file(rel: str, content: str | bytes) -> Callable[[Path], None]:
    return lambda run: _write(run / rel, content) and None


def append_line(rel: str, line: str | bytes) -> Callable[[Path], None]:
    """Insert `line` as the second line of a JSONL file (so it is never a torn last line)."""

    def corrupt(run: Path) -> None:
        path = run / rel
        lines = path.read_bytes().split(b"\n")
        raw = line if isinstance(line, bytes) else line.encode()
        path.write_bytes(b"\n".join([lines[0], raw, *lines[1:]]))

    return corrupt


def capabilities_with(**changes: object) -> Callable[[Path], None]:
    """capabilities.json with its first selected capability changed (a name an analyst could have returned)."""

    def corrupt(run: Path) -> None:
        path = run / "diagnose" / "capabilities.json"
        data = json.loads(path.read_text())
        data["selected"][0].update(changes)
        path.write_text(json.dumps(data))

    return corrupt


TRAJ = "rollout/trajectories.jsonl"
CAPS = "diagnose/capabilities.json"
PLANS = "rollout/plans.json"
MANIFEST = "manifest.json"
SCRIPTED_ANALYST = "models: {analyst: {kind: scripted, script: ['{\"capabilities\": []}']}}\n"


def _not_a_model(tmp: Path, run: Path) -> list[str]:
    folder = tmp / "notamodel"
    _write(folder / "readme.txt", "just a folder")
    return ["rollout", "--env", "library", "--model", str(folder), "--run", str(tmp / "r")]


def _model_yaml(text: str) -> Setup:
    def setup(tmp: Path, run: Path) -> list[str]:
        path = _write(tmp / "m.yaml", text)
        return ["rollout", "--env", "library", "--model", str(path), "--run", str(tmp / "r")]

    return setup


def _resume_after(corrupt: Callable[[Path], None]) -> Setup:
    """Rerun of a rollout (resume) whose run directory, written by a first real `rollout`, holds a spoiled file."""

    def setup(tmp: Path, run: Path) -> list[str]:
        argv = ["rollout", "--env", "library", "--model", "scripted", "--run", str(tmp / "first"), "--progress", "none"]
        main(argv)  # the scripted model has no responses: every episode is an infrastructure failure, retried later
        corrupt(tmp / "first")
        return argv

    return setup


def _diagnose_config(text: str) -> Setup:
    def setup(tmp: Path, run: Path) -> list[str]:
        return ["diagnose", "--run", str(run), "--config", str(_write(tmp / "c.yaml", text)), "--rho", "0.2"]

    return setup


def _config_dir(tmp: Path, run: Path) -> list[str]:
    (tmp / "cfgdir").mkdir()
    return ["run", "--config", str(tmp / "cfgdir")]


def _run_is_file(command: str) -> Setup:
    def setup(tmp: Path, run: Path) -> list[str]:
        path = _write(tmp / "afile", "x")
        extra = ["--env", "library", "--model", "scripted"] if command == "rollout" else []
        return [command, "--run", str(path), *extra]

    return setup


def _import(content: str | bytes | None, *extra: str) -> Setup:
    def setup(tmp: Path, run: Path) -> list[str]:
        path = tmp / "results.json"
        if content is not None:
            _write(path, content)
        return ["import", str(path), "--run", str(tmp / "imp"), *extra]

    return setup


def _no_id(run: Path) -> None:
    line = json.loads((run / TRAJ).read_text().splitlines()[0])
    del line["id"]
    append_line(TRAJ, json.dumps(line))(run)


def _id_not_a_string(run: Path) -> None:
    line = json.loads((run / TRAJ).read_text().splitlines()[0])
    line["id"] = 7
    append_line(TRAJ, json.dumps(line))(run)


LONG = "a" * 300
TIME_LIMIT_S = 30  # a bad input is refused before any work; a row still running after this has failed

BAD: list[Bad] = [
    # -- the config file ---------------------------------------------------------------------------------------------
    Bad("config-missing", lambda tmp, run: ["run", "--config", str(tmp / "none.yaml")], "none.yaml"),
    Bad("config-is-a-directory", _config_dir, "cfgdir"),
    Bad("config-not-utf8", cfg(b"run: {name: \xff\xfe}\n"), "utf-8"),
    Bad("config-invalid-yaml", cfg("run: {name: [\n"), "not valid yaml"),
    Bad("config-top-level-list", cfg("- a\n- b\n"), "mapping"),
    Bad("config-top-level-scalar", cfg("hello\n"), "mapping"),
    Bad("config-old-stages", cfg("stages: {train: {max_steps: 2}}\n"), "stages"),
    Bad("config-unknown-section", cfg("nonsense: {a: 1}\n"), "nonsense"),
    Bad("config-unknown-key", cfg("rollout: {trialz: 2}\n"), "trialz"),
    Bad("config-section-scalar", cfg("rollout: 3\n"), "rollout"),
    Bad("config-section-list", cfg("env: [1, 2]\n"), "env"),
    Bad("config-scalar-section-plus-override", cfg("rollout: 3\n", "--trials", "2", command="rollout"), "rollout"),
    Bad("config-scalar-env-plus-override", cfg("env: 3\n", "--max-steps", "4", command="rollout"), "env"),
    Bad("config-scalar-diagnose-plus-override", _diagnose_config("diagnose: x\n"), "diagnose"),
    Bad("config-run-name-escapes", cfg("run: {name: ../../x, runs_dir: '{TMP}/runs'}\n"), "run.name"),
    Bad("config-run-name-absolute", cfg("run: {name: /tmp/x, runs_dir: '{TMP}/runs'}\n"), "run.name"),
    Bad("config-run-name-slash", cfg("run: {name: a/b, runs_dir: '{TMP}/runs'}\n"), "run.name"),
    Bad("config-run-name-empty", cfg("run: {name: '', runs_dir: '{TMP}/runs'}\n"), "run.name"),
    Bad("config-run-name-dotdot", cfg("run: {name: '..', runs_dir: '{TMP}/runs'}\n"), "run.name"),
    Bad("config-run-name-newline", cfg('run: {name: "x\\n", runs_dir: "{TMP}/runs"}\n'), "run.name"),
    Bad("config-run-name-too-long", cfg(f"run: {{name: {LONG}, runs_dir: '{{TMP}}/runs'}}\n"), "run.name"),
    Bad("config-runs-dir-is-a-file", cfg("run: {name: x, runs_dir: '{TMP}/c.yaml'}\n"), "runs_dir"),
    Bad("config-models-scalar", cfg("models: 3\n"), "models"),
    Bad("config-model-entry-scalar", cfg("models: {policy: 3}\n"), "models.policy"),
    Bad("config-model-kind-unknown", cfg("models: {policy: {kind: magic}}\n"), "models.policy.kind"),
    Bad("config-model-temperature-nan", cfg("models: {policy: {kind: tiny, temperature: .nan}}\n"), "temperature"),
    Bad("config-model-max-tokens-zero", cfg("models: {policy: {kind: tiny, max_tokens: 0}}\n"), "max_tokens"),
    Bad("config-model-concurrency-zero", cfg("models: {policy: {kind: tiny, concurrency: 0}}\n"), "concurrency"),
    Bad("config-model-timeout-negative", cfg("models: {policy: {kind: tiny, timeout_s: -1}}\n"), "timeout_s"),
    Bad("config-env-max-steps-zero", cfg("env: {max_steps: 0}\n"), "env.max_steps"),
    Bad("config-env-max-steps-negative", cfg("env: {max_steps: -3}\n"), "env.max_steps"),
    Bad("config-env-max-errors-negative", cfg("env: {max_errors: -1}\n"), "env.max_errors"),
    Bad("config-env-task-set", cfg("env: {task_set: v9}\n"), "env.task_set"),
    Bad("config-env-library-prompt-unknown", cfg("env: {name: library, options: {prompt: v9}}\n"), "unknown prompt"),
    Bad("config-rollout-trials-zero", cfg("rollout: {trials: 0}\n"), "rollout.trials"),
    Bad("config-rollout-trials-huge", cfg("rollout: {trials: 1000000}\n"), "rollout.trials"),
    Bad("config-rollout-temperature-nan", cfg("rollout: {temperature: .nan}\n"), "rollout.temperature"),
    Bad("config-rollout-temperature-inf", cfg("rollout: {temperature: .inf}\n"), "rollout.temperature"),
    Bad("config-rollout-temperature-negative", cfg("rollout: {temperature: -0.5}\n"), "rollout.temperature"),
    Bad("config-rollout-max-tokens-zero", cfg("rollout: {max_tokens: 0}\n"), "rollout.max_tokens"),
    Bad("config-rollout-timeout-nan", cfg("rollout: {episode_timeout_s: .nan}\n"), "episode_timeout_s"),
    Bad("config-train-max-steps-zero", cfg("train: {max_steps: 0}\n"), "train.max_steps"),
    Bad("config-evaluate-trials-zero", cfg("evaluate: {trials: 0}\n"), "evaluate.trials"),
    Bad("config-evaluate-trials-huge", cfg("evaluate: {trials: 1000000}\n"), "evaluate.trials"),
    Bad("config-diagnose-rho-nan", cfg("diagnose: {rho: .nan}\n"), "diagnose.rho"),
    Bad("config-executor-kind", cfg("executor: {kind: cloud}\n"), "executor.kind"),
    # -- rollout options ---------------------------------------------------------------------------------------------
    Bad("rollout-max-steps-zero", rollout("--max-steps", "0"), "max_steps"),
    Bad("rollout-max-steps-negative", rollout("--max-steps", "-2"), "max_steps"),
    Bad("rollout-temperature-nan", rollout("--temperature", "nan"), "temperature"),
    Bad("rollout-temperature-inf", rollout("--temperature", "inf"), "temperature"),
    Bad("rollout-temperature-negative", rollout("--temperature", "-1"), "temperature"),
    Bad("rollout-trials-zero", rollout("--trials", "0"), "trials"),
    Bad("rollout-trials-negative", rollout("--trials", "-1"), "trials"),
    Bad("rollout-trials-huge", rollout("--trials", "1000000"), "trials"),
    Bad("rollout-trials-not-int", rollout("--trials", "two"), "--trials"),
    Bad("rollout-task-limit-zero", rollout("--task-limit", "0"), "task_limit"),
    Bad("rollout-concurrency-zero", rollout("--concurrency", "0"), "concurrency"),
    Bad("rollout-max-tokens-zero", rollout("--max-tokens", "0"), "max_tokens"),
    Bad("rollout-progress-unknown", rollout("--progress", "loud"), "--progress"),
    Bad("rollout-env-unknown", lambda tmp, run: ["rollout", "--env", "nowhere", "--run", str(tmp / "r")], "nowhere"),
    Bad("rollout-task-set-unknown", rollout("--task-set", "v9"), "task_set"),
    Bad("rollout-split-unknown", rollout("--split", "nosuchsplit"), "nosuchsplit"),
    Bad("rollout-task-unknown", rollout("--task", "no-such-task"), "no-such-task"),
    Bad("rollout-executor-unknown", rollout("--executor", "cloud"), "executor"),
    Bad(
        "rollout-tau2-data-dir-missing",
        lambda tmp, run: [
            "rollout",
            "--env",
            "tau2:retail",
            "--data-dir",
            str(tmp / "nodata"),
            "--run",
            str(tmp / "r"),
        ],
        "nodata",
    ),
    Bad("rollout-model-folder-not-a-model", _not_a_model, "notamodel"),
    Bad("rollout-model-unknown", rollout("--model", "gpt-17"), "gpt-17"),
    Bad("rollout-model-openai-empty", rollout("--model", "openai:"), "openai"),
    Bad("rollout-model-local-missing", rollout("--model", "local:/nonexistent/model"), "/nonexistent/model"),
    Bad("rollout-model-yaml-invalid", _model_yaml("kind: magic\n"), "m.yaml"),
    Bad("rollout-model-yaml-list", _model_yaml("- 1\n"), "m.yaml"),
    Bad("rollout-model-yaml-unknown-key", _model_yaml("kind: tiny\nflavour: x\n"), "flavour"),
    Bad("rollout-run-is-a-file", _run_is_file("rollout"), "afile"),
    Bad("rollout-adapter-escapes", rollout("--adapter", "../x"), "adapter"),
    # -- resume (a rerun of a rollout over a spoiled run directory) --------------------------------------------------
    Bad("resume-line-not-object", _resume_after(append_line(TRAJ, "[1, 2]")), "trajectories.jsonl, line 2"),
    Bad("resume-line-no-id", _resume_after(_no_id), "trajectories.jsonl, line 2"),
    Bad("resume-line-not-json", _resume_after(append_line(TRAJ, "{nope")), "trajectories.jsonl, line 2"),
    Bad("resume-line-not-utf8", _resume_after(append_line(TRAJ, b'{"id": "\xff"}')), "trajectories.jsonl, line 2"),
    Bad("resume-line-id-not-string", _resume_after(_id_not_a_string), "trajectories.jsonl, line 2"),
    Bad("resume-plans-not-object", _resume_after(replace_file(PLANS, "[]")), "plans.json"),
    Bad("resume-plans-schema", _resume_after(replace_file(PLANS, '{"library/train": {"env": 3}}')), "plans.json"),
    Bad("resume-manifest-not-json", _resume_after(replace_file(MANIFEST, "{")), "manifest.json"),
    # -- report ------------------------------------------------------------------------------------------------------
    Bad("report-run-missing", on_run("report", "--run", "{TMP}/nowhere"), "nowhere"),
    Bad("report-run-is-a-file", _run_is_file("report"), "afile"),
    Bad("report-k-zero", on_run("report", "--run", "{RUN}", "--k", "0"), "--k"),
    Bad("report-k-negative", on_run("report", "--run", "{RUN}", "--k", "-3"), "--k"),
    Bad("report-k-huge", on_run("report", "--run", "{RUN}", "--k", "1000000"), "--k"),
    Bad("report-samples-zero", on_run("report", "--run", "{RUN}", "--samples", "0"), "--samples"),
    Bad("report-samples-negative", on_run("report", "--run", "{RUN}", "--samples", "-1"), "--samples"),
    Bad("report-samples-huge", on_run("report", "--run", "{RUN}", "--samples", "100000000"), "--samples"),
    Bad("report-line-not-object", on_run("report", "--run", "{RUN}", corrupt=append_line(TRAJ, "3")), "line 2"),
    Bad("report-line-no-id", on_run("report", "--run", "{RUN}", corrupt=_no_id), "line 2"),
    Bad("report-line-not-json", on_run("report", "--run", "{RUN}", corrupt=append_line(TRAJ, "{x")), "line 2"),
    Bad(
        "report-manifest-not-json", on_run("report", "--run", "{RUN}", corrupt=replace_file(MANIFEST, "{")), "manifest"
    ),
    Bad("report-manifest-list", on_run("report", "--run", "{RUN}", corrupt=replace_file(MANIFEST, "[]")), "manifest"),
    Bad(
        "report-manifest-schema",
        on_run("report", "--run", "{RUN}", corrupt=replace_file(MANIFEST, '{"name": 3}')),
        "manifest.json",
    ),
    Bad(
        "report-manifest-not-utf8",
        on_run("report", "--run", "{RUN}", corrupt=replace_file(MANIFEST, b'{"name": "\xff"}')),
        "manifest.json",
    ),
    Bad(
        "report-manifest-too-new",
        on_run("report", "--run", "{RUN}", corrupt=replace_file(MANIFEST, '{"layout_version": 99}')),
        "layout",
    ),
    Bad("report-plans-schema", on_run("report", "--run", "{RUN}", corrupt=replace_file(PLANS, '{"a": 1}')), "plans"),
    # -- view --------------------------------------------------------------------------------------------------------
    Bad("view-run-missing", on_run("view", "{TMP}/nowhere"), "nowhere"),
    Bad("view-line-not-object", on_run("view", "{RUN}", corrupt=append_line(TRAJ, '"text"')), "line 2"),
    Bad("view-line-no-id", on_run("view", "{RUN}", corrupt=_no_id), "line 2"),
    Bad("view-limit-negative", on_run("view", "{RUN}", "--limit", "-1"), "--limit"),
    Bad("view-file-outside-run", on_run("view", "{RUN}", "--file", "../../etc/passwd"), "--file"),
    Bad("view-file-missing", on_run("view", "{RUN}", "--file", "rollout/none.jsonl"), "none.jsonl"),
    # -- diagnose ----------------------------------------------------------------------------------------------------
    Bad("diagnose-run-missing", on_run("diagnose", "--run", "{TMP}/nowhere"), "nowhere"),
    Bad("diagnose-line-not-object", on_run("diagnose", "--run", "{RUN}", corrupt=append_line(TRAJ, "null")), "line 2"),
    Bad("diagnose-line-no-id", on_run("diagnose", "--run", "{RUN}", corrupt=_no_id), "line 2"),
    Bad("diagnose-rho-nan", on_run("diagnose", "--run", "{RUN}", "--rho", "nan"), "rho"),
    Bad("diagnose-rho-above-one", on_run("diagnose", "--run", "{RUN}", "--rho", "2"), "rho"),
    Bad("diagnose-k-zero", on_run("diagnose", "--run", "{RUN}", "--k", "0"), "k"),
    Bad("diagnose-n-runs-zero", on_run("diagnose", "--run", "{RUN}", "--n-runs", "0"), "n_runs"),
    Bad("diagnose-analyst-unknown", on_run("diagnose", "--run", "{RUN}", "--analyst", "oracle9"), "oracle9"),
    Bad("diagnose-split-test", on_run("diagnose", "--run", "{RUN}", "--split", "test"), "test"),
    Bad(
        "diagnose-probe-samples-zero",
        on_run("diagnose", "--run", "{RUN}", "--analyst", "probe", "--probe-samples", "0"),
        "probe.samples",
    ),
    Bad(
        "diagnose-probe-no-decision-point",
        on_run("diagnose", "--run", "{RUN}", "--analyst", "probe", "--probe-model", "scripted"),
        "decision point",
    ),
    Bad(
        "diagnose-analyst-scripted-runs-out",
        lambda tmp, run: [
            "diagnose",
            "--run",
            str(run),
            "--config",
            str(_write(tmp / "a.yaml", SCRIPTED_ANALYST)),
            "--analyst",
            "analyst",
        ],
        "analyst",
    ),
    # -- synthesize --------------------------------------------------------------------------------------------------
    Bad("synthesize-run-missing", on_run("synthesize", "--run", "{TMP}/nowhere"), "nowhere"),
    Bad(
        "synthesize-caps-not-json",
        on_run("synthesize", "--run", "{RUN}", "--no-calibrate", corrupt=replace_file(CAPS, "{")),
        CAPS,
    ),
    Bad(
        "synthesize-caps-list",
        on_run("synthesize", "--run", "{RUN}", "--no-calibrate", corrupt=replace_file(CAPS, "[]")),
        CAPS,
    ),
    Bad(
        "synthesize-caps-schema",
        on_run("synthesize", "--run", "{RUN}", "--no-calibrate", corrupt=replace_file(CAPS, '{"selected": 3}')),
        CAPS,
    ),
    Bad(
        "synthesize-cap-name-long",
        on_run("synthesize", "--run", "{RUN}", "--no-calibrate", corrupt=capabilities_with(name=LONG)),
        CAPS,
    ),
    Bad(
        "synthesize-cap-name-newline",
        on_run("synthesize", "--run", "{RUN}", "--no-calibrate", corrupt=capabilities_with(name="cap\n")),
        CAPS,
    ),
    Bad(
        "synthesize-cap-name-escapes",
        on_run("synthesize", "--run", "{RUN}", "--no-calibrate", corrupt=capabilities_with(name="../x")),
        CAPS,
    ),
    Bad(
        "synthesize-cap-name-empty",
        on_run("synthesize", "--run", "{RUN}", "--no-calibrate", corrupt=capabilities_with(name="")),
        CAPS,
    ),
    Bad(
        "synthesize-capability-unknown",
        on_run("synthesize", "--run", "{RUN}", "--no-calibrate", "--capability", "nope"),
        "nope",
    ),
    Bad(
        "synthesize-samples-zero", on_run("synthesize", "--run", "{RUN}", "--no-calibrate", "--samples", "0"), "samples"
    ),
    Bad("synthesize-groups-zero", on_run("synthesize", "--run", "{RUN}", "--no-calibrate", "--groups", "0"), "groups"),
    Bad(
        "synthesize-max-attempts-zero",
        on_run("synthesize", "--run", "{RUN}", "--no-calibrate", "--max-attempts", "0"),
        "max_attempts",
    ),
    Bad(
        "synthesize-generator-unknown",
        on_run("synthesize", "--run", "{RUN}", "--no-calibrate", "--generator", "magic"),
        "generator",
    ),
    # -- train, route, evaluate, import, serve, env check ------------------------------------------------------------
    Bad("train-steps-zero", on_run("train", "--run", "{RUN}", "--steps", "0"), "max_steps"),
    Bad("train-lr-nan", on_run("train", "--run", "{RUN}", "--lr", "nan"), "learning_rate"),
    Bad("train-capability-unknown", on_run("train", "--run", "{RUN}", "--capability", "nope"), "nope"),
    Bad("train-num-generations-zero", on_run("train", "--run", "{RUN}", "--num-generations", "0"), "num_generations"),
    Bad("route-tasks-zero", on_run("route", "--run", "{RUN}", "--tasks", "0"), "tasks_per_env"),
    Bad("route-calibration-unknown", on_run("route", "--run", "{RUN}", "--calibration", "often"), "calibration"),
    Bad("evaluate-trials-zero", on_run("evaluate", "--run", "{RUN}", "--trials", "0"), "trials"),
    Bad("evaluate-trials-huge", on_run("evaluate", "--run", "{RUN}", "--trials", "1000000"), "trials"),
    Bad("evaluate-arm-unknown", on_run("evaluate", "--run", "{RUN}", "--arms", "base,magic"), "magic"),
    Bad("evaluate-task-limit-zero", on_run("evaluate", "--run", "{RUN}", "--task-limit", "0"), "task_limit"),
    Bad("import-file-missing", _import(None), "results.json"),
    Bad("import-not-json", _import("{"), "results.json"),
    Bad("import-not-utf8", _import(b"\xff\xfe"), "results.json"),
    Bad("import-format-unknown", _import("{}", "--format", "magic"), "magic"),
    Bad("serve-port-negative", on_run("serve", "--run", "{RUN}", "--port", "-1"), "--port"),
    Bad("serve-port-too-big", on_run("serve", "--run", "{RUN}", "--port", "70000"), "--port"),
    Bad("env-check-unknown", lambda tmp, run: ["env", "check", "nowhere"], "nowhere"),
    Bad("command-unknown", lambda tmp, run: ["frobnicate"], "frobnicate"),
    Bad("run-stage-unknown", cfg("run: {name: x, runs_dir: '{TMP}/runs'}\n", "--stage", "nope"), "nope"),
]


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory with every artefact (built once): rollout (with plans.json), diagnose, envs, ... ."""
    from trace_rl.artifacts.store import RunDir
    from trace_rl.artifacts.trajectories import RolloutPlan, read_trajectories, write_rollout_plans

    root = build_synthetic_run(tmp_path_factory.mktemp("bad") / "synthetic").root
    trajectories, _ = read_trajectories(root / TRAJ)
    tasks = sorted({t.task_id for t in trajectories.values()})
    plan = RolloutPlan(env="library", split="train", task_ids=tasks, trials=3, trial_seeds=[300, 301, 302])
    write_rollout_plans(RunDir(root), {"library/train": plan})
    return root


def _snapshot(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("bad", BAD, ids=[b.id for b in BAD])
def test_bad_input_is_one_line_exit_2_and_loses_nothing(
    bad: Bad, tmp_path: Path, synthetic_run: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a config without `run:` writes runs/demo relative to the working directory
    run = tmp_path / "run"
    shutil.copytree(synthetic_run, run)
    argv = bad.setup(tmp_path, run)
    before = _snapshot(tmp_path)
    capsys.readouterr()

    def too_slow(signum: int, frame: object) -> None:
        raise TimeoutError(f"still running after {TIME_LIMIT_S} s")

    previous = signal.signal(signal.SIGALRM, too_slow)
    signal.alarm(TIME_LIMIT_S)
    try:
        code = main(argv)
    except BaseException as exc:  # a crash (or work that should have been refused): the contract is broken
        pytest.fail(f"{argv[0]} raised {type(exc).__name__}: {exc}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, f"exit {code}, stderr: {err!r}"
    assert "Traceback" not in err
    assert len(lines) == 1, f"expected one stderr line, got {lines!r}"
    assert bad.names.lower() in lines[0].lower(), f"{lines[0]!r} does not name {bad.names!r}"
    for path, data in before.items():
        assert path.exists(), f"{path} was lost"
        if path.name == MANIFEST and data.startswith(b"{\n"):  # a well-formed manifest may record the command
            old = json.loads(data)["commands"]
            assert json.loads(path.read_text())["commands"][: len(old)] == old, f"{path} lost commands"
            continue
        if path.name == "plans.json" and path.read_bytes() != data:  # a rerun may re-stamp `updated_at`, no more
            strip = lambda raw: {k: {**p, "updated_at": 0} for k, p in json.loads(raw).items()}  # noqa: E731
            assert strip(path.read_bytes()) == strip(data), f"{path} was changed"
            continue
        assert path.read_bytes() == data, f"{path} was changed"


def test_the_table_is_at_least_the_issues_101_kinds() -> None:
    assert len(BAD) >= 101
    assert len({b.id for b in BAD}) == len(BAD)


def test_a_trajectory_line_is_still_a_trajectory(synthetic_run: Path) -> None:
    """The table's spoiled lines are spoiled on purpose: the synthetic run's own lines are valid trajectories."""
    first = json.loads((synthetic_run / TRAJ).read_text().splitlines()[0])
    assert Trajectory.model_validate(first).id == first["id"]
