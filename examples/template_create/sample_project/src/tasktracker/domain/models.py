"""Domain entities, independent of the web and persistence layers."""

from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum


class TaskStatus(str, Enum):
    TODO = "todo"
    IN_PROGRESS = "in_progress"
    DONE = "done"


class Priority(str, Enum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class Task:
    title: str
    description: str = ""
    priority: Priority = Priority.MEDIUM
    status: TaskStatus = TaskStatus.TODO
    due_at: datetime | None = None
    created_at: datetime = field(default_factory=_now)
    id: int | None = None

    def is_overdue(self, now: datetime | None = None) -> bool:
        if self.due_at is None or self.status is TaskStatus.DONE:
            return False
        return (now or _now()) > self.due_at

    def complete(self) -> None:
        self.status = TaskStatus.DONE
