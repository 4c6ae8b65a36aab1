"""The mock domain's agent toolkit (4 tools + assertion methods) and user toolkit (2 tools + helper methods)."""

from __future__ import annotations

from typing import ClassVar

from trace_rl.envs.tau2.mock.data_model import MockDB, MockTask, MockUser, MockUserDB, Notification
from trace_rl.envs.tau2.tools_base import Tau2Tools
from trace_rl.envs.toolkit import ToolType, tool


class MockTools(Tau2Tools):
    """Task management for a tiny team."""

    DOMAIN: ClassVar[str] = "mock"
    db: MockDB

    def _user(self, user_id: str) -> MockUser:
        if user_id not in self.db.users:
            raise ValueError(f"User {user_id} not found")
        return self.db.users[user_id]

    def _task(self, task_id: str) -> MockTask:
        if task_id not in self.db.tasks:
            raise ValueError(f"Task {task_id} not found")
        return self.db.tasks[task_id]

    @tool(ToolType.WRITE)
    def create_task(self, user_id: str, title: str, description: str | None = None) -> MockTask:
        """Create a new task for a user.

        Args:
            user_id: The ID of the user creating the task
            title: The title of the task
            description: Optional description of the task
        """
        self._user(user_id)
        task_id = f"task_{len(self.db.tasks) + 1}"
        task = MockTask(task_id=task_id, title=title, description=description, status="pending")
        self.db.insert("tasks", task_id, task)
        self.db.writable("users", user_id).tasks.append(task_id)
        return task

    @tool(ToolType.READ)
    def get_users(self) -> list[MockUser]:
        """Get all users in the database."""
        return list(self.db.users.values())

    @tool(ToolType.WRITE)
    def update_task_status(self, task_id: str, status: str) -> MockTask:
        """Update the status of a task.

        Args:
            task_id: The ID of the task to update
            status: The new status of the task
        """
        self._task(task_id)
        if not self.quirk("unchecked_status") and status not in ("pending", "completed"):
            raise ValueError(f"Invalid status: {status}")
        task = self.db.writable("tasks", task_id)
        task.status = status  # stored as passed: no validation on assignment (quirk unchecked_status)
        return task

    @tool(ToolType.GENERIC)
    def transfer_to_human_agents(self, summary: str) -> str:
        """Transfer the user to a human agent, with a summary of the user's issue.

        Args:
            summary: A summary of the user's issue.
        """
        return "Transfer successful"

    # -- assertions (not tools) ---------------------------------------------------------------------------------
    def assert_number_of_tasks(self, user_id: str, expected_number: int) -> bool:
        return len(self._user(user_id).tasks) == expected_number

    def assert_task_status(self, task_id: str, expected_status: str) -> bool:
        return self._task(task_id).status == expected_status


class MockUserTools(Tau2Tools):
    """The simulated user's own device: a notification inbox."""

    DOMAIN: ClassVar[str] = "mock"
    db: MockUserDB

    @tool(ToolType.READ)
    def check_notifications(self) -> list[Notification]:
        """Check all notifications in the user's inbox."""
        return list(self.db.notifications.values())

    @tool(ToolType.WRITE)
    def dismiss_notification(self, notification_id: str) -> str:
        """Dismiss (mark as read) a notification.

        Args:
            notification_id: The ID of the notification to dismiss.
        """
        if notification_id not in self.db.notifications:
            raise ValueError(f"Notification {notification_id} not found")
        self.db.writable("notifications", notification_id).status = "read"
        return f"Notification {notification_id} dismissed"

    # -- helpers for initial state and assertions (not tools) ---------------------------------------------------
    def add_notification(self, notification_id: str, message: str, task_id: str | None = None) -> Notification:
        note = Notification(notification_id=notification_id, message=message, status="unread", task_id=task_id)
        self.db.insert("notifications", notification_id, note)
        return note

    def assert_notification_status(self, notification_id: str, expected_status: str) -> bool:
        if notification_id not in self.db.notifications:
            raise ValueError(f"Notification {notification_id} not found")
        return self.db.notifications[notification_id].status == expected_status
