"""report.html: every section renders from a full synthetic run, says "not run yet" without its artefacts, survives
a broken artefact, escapes model text, embeds only data: PNGs; and the route / evaluate schemas round-trip."""

from __future__ import annotations

import base64
import re
import struct
from html.parser import HTMLParser
from pathlib import Path

import pytest

from trace_rl.artifacts.evaluation import ArmDifference, Comparison, Estimate, RoutingAccuracy
from trace_rl.artifacts.store import RunDir
from trace_rl.errors import UserError
from trace_rl.report import plots
from trace_rl.report.html import NOT_RUN, SECTIONS, render_report, write_html_report

from .synthetic import build_synthetic_run


class Page(HTMLParser):
    """Sections (by id) with their text, img srcs, element ids, links, and table classes."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: dict[str, str] = {}
        self.current: str | None = None
        self.imgs: list[str] = []
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.tables: list[str] = []
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"] or "")
        if tag == "section":
            self.current = a.get("id")
            self.sections[self.current or ""] = ""
        elif tag == "img":
            self.imgs.append(a.get("src") or "")
        elif tag == "a" and a.get("href"):
            self.links.append(a["href"] or "")
        elif tag == "table":
            self.tables.append(a.get("class") or "")
        elif tag in ("script", "link", "iframe"):
            self.scripts += 1

    def handle_data(self, data: str) -> None:
        if self.current is not None:
            self.sections[self.current] += data


def parse(text: str) -> Page:
    page = Page()
    page.feed(text)
    return page


def png_size(src: str) -> tuple[int, int]:
    assert src.startswith("data:image/png;base64,")
    data = base64.b64decode(src.split(",", 1)[1], validate=True)
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_full_run_renders_every_section(full_run: RunDir) -> None:
    path = write_html_report(full_run)
    assert path == full_run.root / "report.html"
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".report.html")]  # atomic: no temp left
    page = parse(path.read_text())
    for spec in SECTIONS:
        text = page.sections[spec.key]
        assert NOT_RUN not in text and "could not render" not in text, (spec.key, text[:300])
    assert page.scripts == 0 and all(src.startswith("data:image/png;base64,") for src in page.imgs)
    sizes = [png_size(src) for src in page.imgs]
    assert len(sizes) >= 7 and all(w >= 200 and h >= 150 for w, h in sizes)
    assert "comparison" in page.tables and "confusion" in page.tables
    # the story: pass^k, terminations, failures, evidence, calibration, curves, router, the arms, Fig. 4
    assert "pass^k" in page.sections["rollouts"] and "max_steps" in page.sections["rollouts"]
    assert "3 of 11 scored failures" in page.sections["rollouts"]
    assert "verify_before_act" in page.sections["capabilities"] and "+0.42 ± 0.05" in page.sections["capabilities"]
    assert "needs_attention" in page.sections["environments"] and "out of range" in page.sections["environments"]
    assert "10 logged step(s)" in page.sections["adapters"]
    assert "0.733 [0.570, 0.870]" in page.sections["routing"]
    comparison = page.sections["comparison"]
    for arm in ("Base model", "TRACE", "GRPO on target", "GEPA", "Best single adapter", "Multi-capability adapter"):
        assert arm in comparison
    assert "+0.141" in comparison and "TRACE Fig. 4" in comparison
    # evidence links resolve to trajectories shown on the page
    traj_links = [h[1:] for h in page.links if h.startswith("#traj-")]
    assert traj_links and all(t in page.ids for t in traj_links)
    assert "trajectories" in page.sections  # the appendix holds evidence not shown among the failures


def test_model_text_is_escaped(full_run: RunDir) -> None:
    text = render_report(full_run)
    assert "<script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "&lt;b&gt;now&lt;/b&gt;" in text


def test_missing_stages_say_not_run_yet(tmp_path: Path) -> None:
    empty = build_synthetic_run(tmp_path / "empty", stages=())
    page = parse(render_report(empty))
    assert all(NOT_RUN in page.sections[s.key] for s in SECTIONS) and page.imgs == []
    partial = build_synthetic_run(tmp_path / "partial", stages=("rollout", "evaluate"))
    page = parse(render_report(partial))
    assert NOT_RUN not in page.sections["rollouts"] and NOT_RUN in page.sections["capabilities"]
    assert NOT_RUN in page.sections["routing"] and NOT_RUN not in page.sections["comparison"]
    assert len(page.imgs) == 3  # pass^k curve, arm bars, budget curve
    # a run directory without even a manifest still renders
    assert NOT_RUN in render_report(RunDir(tmp_path / "nothing"))


def test_a_broken_artefact_breaks_only_its_section(tmp_path: Path) -> None:
    run = build_synthetic_run(tmp_path / "r", stages=("rollout", "route", "evaluate"))
    (run.root / "evaluate" / "comparison.json").write_text('{"env": "x"')
    (run.root / "route" / "accuracy.json").write_text('{"labels": ["a"], "confusion": [[1, 2]]}')
    page = parse(render_report(run))
    assert "could not render" in page.sections["comparison"] and "could not render" in page.sections["routing"]
    assert "could not render" not in page.sections["rollouts"]


def test_schemas_round_trip_and_validate(full_run: RunDir, tmp_path: Path) -> None:
    comp = Comparison.load(full_run.root / "evaluate" / "comparison.json")
    assert [a.name for a in comp.arms][:2] == ["base", "trace"] and comp.k_max == 3
    assert comp.arm("trace").at(1, diff=True).value == pytest.approx(0.141)  # type: ignore[union-attr]
    assert comp.arm("gepa").display == "GEPA (prompt optimisation)"  # type: ignore[union-attr]
    assert Comparison.load(comp.save(tmp_path / "c.json")) == comp
    acc = RoutingAccuracy.load(full_run.root / "route" / "accuracy.json")
    assert acc.labels[-1] == "base" and sum(map(sum, acc.confusion)) == acc.n_tasks
    with pytest.raises(ValueError, match="3x3"):
        RoutingAccuracy(truth="t", labels=["a", "b", "base"], confusion=[[1]], accuracy=Estimate(value=1), n_tasks=1)
    (tmp_path / "bad.json").write_text('{"env": "x", "unknown": 1}')
    with pytest.raises(UserError, match="not a valid Comparison"):
        Comparison.load(tmp_path / "bad.json")


def test_plots_are_pngs() -> None:
    for png in (
        plots.confusion_matrix(["a", "base"], [[3, 1], [0, 2]]),
        plots.training_curve([{"step": 1, "reward": 0.1}, {"step": 2, "reward": 0.3}], "t"),
        plots.arm_bars(["base", "trace"], [0.3, None], [0.2, None], [0.4, None]),
    ):
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 2000
    assert re.match(r"data:image/png;base64,[A-Za-z0-9+/=]+$", plots.data_uri(b"\x89PNG"))


def test_budget_curve_draws_one_line_per_arm_and_series() -> None:
    from trace_rl.artifacts.evaluation import BudgetPoint

    points = [
        BudgetPoint(arm="trace", budget=0, value=0.1),
        BudgetPoint(arm="trace", budget=80, value=0.15, series="capability prefixes"),
        BudgetPoint(arm="trace", budget=80, value=0.12, series="checkpoints"),
        BudgetPoint(arm="trace", budget=160, value=0.17),
        BudgetPoint(arm="grpo_target", budget=0, value=0.1),
        BudgetPoint(arm="grpo_target", budget=40, value=0.11),
        BudgetPoint(arm="grpo_target", budget=160, value=0.16),
    ]
    lines = {(arm, series): [(p.budget, p.value) for p in mine] for arm, series, mine in plots.curve_lines(points)}
    assert lines == {
        ("trace", "capability prefixes"): [(0, 0.1), (80, 0.15), (160, 0.17)],
        ("trace", "checkpoints"): [(0, 0.1), (80, 0.12), (160, 0.17)],
        ("grpo_target", ""): [(0, 0.1), (40, 0.11), (160, 0.16)],
    }
    assert plots.budget_curve(points)[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_evaluation_of_the_run_is_shown_with_the_guard_verdicts(tmp_path: Path) -> None:
    from trace_rl.artifacts.evaluation import ArmResult, PassKRow, TargetedRow

    run = build_synthetic_run(tmp_path / "r", stages=("evaluate",))
    verdicts = [
        {
            "adapter": "keep_me",
            "tasks": 5,
            "adapter_score": 0.4,
            "base_score": 0.2,
            "delta": 0.2,
            "low": 0.0,
            "high": 0.4,
            "kept": True,
        },
        {
            "adapter": "drop_me",
            "tasks": 4,
            "adapter_score": 0.0,
            "base_score": 0.5,
            "delta": -0.5,
            "low": -0.75,
            "high": -0.25,
            "kept": False,
        },
        {
            "adapter": "unrouted",
            "tasks": 0,
            "adapter_score": None,
            "base_score": None,
            "delta": None,
            "low": None,
            "high": None,
            "kept": True,
        },
    ]
    guard = {"score": "success", "train_tasks": 40, "trials": 3, "selection_rollouts": 240, "min_delta": 0.0}
    rows = [PassKRow(k=1, value=0.3, low=0.2, high=0.4, tasks=100)]
    arms = [
        ArmResult(name="base", pass_k=rows),
        ArmResult(
            name="trace_guarded", pass_k=rows, diff_to_base=rows, details={"guard": {**guard, "verdicts": verdicts}}
        ),
    ]
    beside = run.evaluation("range1")
    gain = PassKRow(k=1, value=0.25, low=0.1, high=0.4, tasks=20)
    loss = PassKRow(k=1, value=-0.125, low=-0.2, high=-0.05, tasks=80)
    targeted = [TargetedRow(adapter="drop_me", own_families=["lookup_answer"], own=gain, others=loss)]
    versus = [ArmDifference(arm="grpo_target", rows=[PassKRow(k=1, value=0.075, low=0.01, high=0.14, tasks=100)])]
    Comparison(
        env="library", split="test", tasks=100, trials=3, arms=arms, targeted=targeted, trace_versus=versus
    ).save(beside.comparison)
    section = parse(render_report(run)).sections["comparison"]
    assert "evaluate/" in section and "evaluate@range1/" in section
    assert section.index("evaluate/") < section.index("evaluate@range1/")
    assert "Multi-capability adapter" in section  # the first evaluation is still there
    assert "TRACE, held-in guard" in section and "Held-in guard" in section
    assert "drop_me" in section and "dropped (base serves its tasks)" in section and "-0.500" in section
    assert "40 target train tasks × 3 trials, 240 episodes" in section
    assert "own families against the rest" in section and "lookup_answer" in section
    assert "+0.250" in section and "-0.125" in section and "80 tasks" in section
    assert "TRACE against each baseline" in section and "GRPO on target" in section and "+0.075" in section
