"""Domain loading: data-dir resolution, clear UserErrors for bad input, splits, prompts, reward-basis override."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trace_rl.config import EnvConfig
from trace_rl.envs.base import Domain
from trace_rl.envs.registry import load_domain
from trace_rl.envs.tau2 import QUIRKS, data
from trace_rl.envs.tau2.mock import MockTools, MockUserTools
from trace_rl.envs.users import ScriptedUser
from trace_rl.errors import UserError
from trace_rl.testing.playback import gold_messages

from .tau2_helpers import DATA, domain, needs_data, run, task

MOCK_TASK = {
    "id": "t1",
    "user_scenario": {"instructions": "Create a task called 'x' for user_1."},
    "evaluation_criteria": {
        "actions": [{"action_id": "a", "name": "create_task", "arguments": {"user_id": "user_1", "title": "x"}}]
    },
}


def write_mock(root: Path, tasks: object = None, **overrides: object) -> Path:
    """A minimal, valid mock data directory (no real data needed); `overrides` replace file contents."""
    mock = root / "mock"
    mock.mkdir(parents=True)
    files: dict[str, object] = {
        "db.json": {
            "tasks": {"task_1": {"task_id": "task_1", "title": "T", "description": None, "status": "pending"}},
            "users": {"user_1": {"user_id": "user_1", "name": "U", "tasks": ["task_1"]}},
        },
        "user_db.json": {"notifications": {}},
        "tasks.json": [MOCK_TASK] if tasks is None else tasks,
        "tasks_v0.2.json": [MOCK_TASK],
        "split_tasks.json": {"base": ["t1"]},
        "tools.json": {"agent_tools": MockTools.schemas(MockTools), "user_tools": MockUserTools.schemas(MockUserTools)},
        "policy.md": "Be kind.",
    }
    files.update({k.replace("_json", ".json").replace("_md", ".md"): v for k, v in overrides.items()})
    for name, content in files.items():
        if content is None:
            continue
        text = content if isinstance(content, str) else json.dumps(content)
        (mock / name).write_text(text)
    (root / "user_simulator").mkdir()
    (root / "user_simulator" / "simulation_guidelines.md").write_text("plain")
    (root / "user_simulator" / "simulation_guidelines_tools.md").write_text("with tools")
    return root


def mock_domain(root: Path, **kw: object):
    return load_domain("tau2:mock", EnvConfig(name="tau2:mock", data_dir=root, **kw))  # type: ignore[arg-type]


# -- no real data needed ----------------------------------------------------------------------------------------
def test_synthetic_mock_dir_works(tmp_path: Path) -> None:
    dom = mock_domain(write_mock(tmp_path))
    assert isinstance(dom, Domain) and dom.name == "tau2:mock"
    (t,) = dom.tasks("base")
    from trace_rl.testing.playback import run_scripted

    assert run_scripted(dom.make_env(), t, gold_messages(t)).reward == 1.0
    assert dom.guidelines() == "with tools"


def test_missing_data_dir_names_it(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"env.data_dir: τ² data directory not found: .*nowhere"):
        mock_domain(tmp_path / "nowhere")


def test_env_var_pointing_nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACE_TAU2_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(UserError, match="TRACE_TAU2_DATA: τ² data directory not found"):
        load_domain("tau2:mock", EnvConfig(name="tau2:mock"))


def test_env_var_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACE_TAU2_DATA", str(write_mock(tmp_path)))
    assert load_domain("tau2:mock", EnvConfig(name="tau2:mock")).root == tmp_path.resolve()


def test_no_data_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRACE_TAU2_DATA", raising=False)
    monkeypatch.setattr(data, "candidate_dirs", lambda: [tmp_path / "a", tmp_path / "b"])
    with pytest.raises(UserError, match=r"set env\.data_dir or TRACE_TAU2_DATA; looked in"):
        load_domain("tau2:mock", EnvConfig(name="tau2:mock"))


def test_unknown_domain() -> None:
    with pytest.raises(UserError, match=r"unknown τ² domain 'telecom' \(known: mock, retail, airline\)"):
        load_domain("tau2:telecom", EnvConfig(name="tau2:telecom"))


def test_domain_folder_missing(tmp_path: Path) -> None:
    write_mock(tmp_path)
    with pytest.raises(UserError, match=r"retail: τ² domain folder not found"):
        load_domain("tau2:retail", EnvConfig(name="tau2:retail", data_dir=tmp_path))


def test_unknown_split(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"tau2:mock: unknown split 'train' \(known: base\)"):
        mock_domain(write_mock(tmp_path)).tasks("train")


def test_invalid_json_task_file(tmp_path: Path) -> None:
    dom = mock_domain(write_mock(tmp_path, tasks="[{"))
    with pytest.raises(UserError, match=r"tasks.json: not valid JSON \(line 1"):
        dom.tasks("base")


def test_task_failing_validation_names_file_task_and_field(tmp_path: Path) -> None:
    bad = json.loads(json.dumps(MOCK_TASK))
    del bad["evaluation_criteria"]["actions"][0]["name"]
    dom = mock_domain(write_mock(tmp_path, tasks=[bad]))
    with pytest.raises(
        UserError, match=r"tasks.json: task\[0\] \(id 't1'\): evaluation_criteria.actions.0.name: Field required"
    ):
        dom.tasks("base")


def test_task_file_must_be_a_list(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="top level must be a JSON list of tasks"):
        mock_domain(write_mock(tmp_path, tasks={"id": "t1"})).tasks("base")


def test_split_naming_a_missing_task(tmp_path: Path) -> None:
    dom = mock_domain(write_mock(tmp_path, split_tasks_json={"base": ["t1", "t9"]}))
    with pytest.raises(UserError, match=r"split_tasks.json: base: task id 't9' is not in tasks.json"):
        dom.tasks("base")


def test_db_failing_validation(tmp_path: Path) -> None:
    dom = mock_domain(write_mock(tmp_path, db_json={"tasks": {}, "users": {"u": {"user_id": "u"}}}))
    with pytest.raises(UserError, match=r"db.json: users.u.name: Field required"):
        dom.make_env()


def test_tools_json_mismatch(tmp_path: Path) -> None:
    tools = {"agent_tools": MockTools.schemas(MockTools)[:2], "user_tools": MockUserTools.schemas(MockUserTools)}
    dom = mock_domain(write_mock(tmp_path, tools_json=tools))
    with pytest.raises(UserError, match=r"tools.json: agent_tools: tools .* do not match the mock toolkit"):
        dom.make_env()


def test_missing_policy(tmp_path: Path) -> None:
    dom = mock_domain(write_mock(tmp_path, policy_md=None))
    with pytest.raises(UserError, match=r"policy.md: file not found"):
        dom.system_prompt()


def test_unknown_quirk_lists_known(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"env.quirks: unknown quirk 'nope' for tau2:mock \(known: unchecked_status\)"):
        mock_domain(write_mock(tmp_path), quirks={"nope": False})
    with pytest.raises(UserError, match="known: book_duplicate_payments, cancel_keeps_seats"):
        load_domain("tau2:airline", EnvConfig(name="tau2:airline", data_dir=tmp_path, quirks={"x": True}))


def test_unknown_reward_component(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"env.reward_basis: unknown component 'DBX'"):
        mock_domain(write_mock(tmp_path), reward_basis=["DBX"])


def test_options_hidden_tools(tmp_path: Path) -> None:
    root = write_mock(tmp_path)
    env = mock_domain(root, options={"hidden_tools": ["get_users"]}).make_env()
    assert "get_users" not in {s["function"]["name"] for s in env.tool_schemas()}
    with pytest.raises(UserError, match=r"env.options.hidden_tools: must list tools of tau2:mock"):
        mock_domain(root, options={"hidden_tools": ["nope"]})
    with pytest.raises(UserError, match=r"env.options: unknown option 'size'"):
        mock_domain(root, options={"size": 3})


def test_quirk_registry_is_documented() -> None:
    from trace_rl.envs.tau2 import quirks

    for names in QUIRKS.values():
        for name in names:
            assert f"`{name}`" in (quirks.__doc__ or "")


# -- real data --------------------------------------------------------------------------------------------------
@needs_data
@pytest.mark.parametrize("task_set", ["head", "v0.2"])
def test_splits(task_set: str) -> None:
    retail, airline = domain("retail", task_set), domain("airline", task_set)
    assert retail.splits() == ["train", "test", "base"] and retail.extra_splits() == ["tau1", "train+tau1"]
    sizes = {s: len(retail.tasks(s)) for s in retail.splits() + retail.extra_splits()}
    assert sizes == {"train": 74, "test": 40, "base": 114, "tau1": 500, "train+tau1": 574}
    assert {s: len(airline.tasks(s)) for s in airline.splits()} == {"train": 30, "test": 20, "base": 50}
    for dom in (retail, airline):
        assert not {t.id for t in dom.tasks("train")} & {t.id for t in dom.tasks("test")}
    assert retail.tasks("tau1")[0].id == "tau1_train_0"


@needs_data
def test_tau1_gold_replay() -> None:
    from trace_rl.envs.check import check_domain

    result = check_domain(domain("retail"), ["tau1"])
    assert result.line == "gold-replay: 500/500 db-match"


@needs_data
def test_prompts_and_schemas() -> None:
    retail = domain("retail")
    prompt = retail.system_prompt()
    assert prompt.startswith("<instructions>\n") and "</instructions>\n<policy>\n" in prompt
    assert prompt.endswith(f"{retail.policy()}\n</policy>")
    tools_json = json.loads((DATA / "retail" / "tools.json").read_text())
    assert retail.make_env().tool_schemas() == tools_json["agent_tools"]
    assert retail.guidelines() == (DATA / "user_simulator" / "simulation_guidelines.md").read_text()
    assert retail.scripted_user(task("retail", "0")) is None
    mock = domain("mock")
    env = mock.make_env()
    assert [s["function"]["name"] for s in env.user_tool_schemas()] == ["check_notifications", "dismiss_notification"]
    assert mock.guidelines() == (DATA / "user_simulator" / "simulation_guidelines_tools.md").read_text()
    assert isinstance(mock.scripted_user(task("mock", "create_task_1")), ScriptedUser)
    assert len(domain("airline").make_env().tool_schemas()) == 14
    paper = load_domain(
        "tau2:retail",
        EnvConfig(
            name="tau2:retail",
            data_dir=DATA,
            reward_basis=["DB", "COMMUNICATE"],
            options={"hidden_tools": ["get_item_details"]},
        ),
    )
    assert len(paper.make_env().tool_schemas()) == 15


@needs_data
def test_reward_basis_override_reproduces_the_paper_grading() -> None:
    with_nl = next(t for t in domain("retail").tasks("base") if t.evaluation_criteria.nl_assertions)
    msgs = gold_messages(with_nl)
    with pytest.raises(UserError, match="no judge model is configured"):
        run("retail", with_nl.id, msgs)
    ep = run("retail", with_nl.id, msgs, basis=("DB", "COMMUNICATE"))
    assert ep.reward == 1.0 and ep.traj.reward_info.reward_basis == ["DB", "COMMUNICATE"]
    assert "NL_ASSERTION" not in ep.breakdown()
