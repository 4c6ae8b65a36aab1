"""The mock domain's DBs (docs/tau2-fidelity.md §6): tasks and users on the agent side, notifications on the user
side."""

from __future__ import annotations

from typing import ClassVar, Literal

from trace_rl.envs.tau2.db import Tau2DB, Tau2Record

TaskStatus = Literal["pending", "completed"]


class MockTask(Tau2Record):
    task_id: str
    title: str
    description: str | None = None
    status: TaskStatus


class MockUser(Tau2Record):
    user_id: str
    name: str
    tasks: list[str]


class MockDB(Tau2DB):
    TABLES: ClassVar[tuple[str, ...]] = ("tasks", "users")

    tasks: dict[str, MockTask]
    users: dict[str, MockUser]


class Notification(Tau2Record):
    notification_id: str
    message: str
    status: Literal["unread", "read"] = "unread"
    task_id: str | None = None


class MockUserDB(Tau2DB):
    TABLES: ClassVar[tuple[str, ...]] = ("notifications",)

    notifications: dict[str, Notification]
