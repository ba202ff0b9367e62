from datetime import datetime, timedelta, timezone

import pytest

from tasktracker.domain.models import Priority, Task, TaskStatus
from tasktracker.domain.services import TaskNotFoundError, TaskService


class InMemoryTaskRepository:
    def __init__(self) -> None:
        self._tasks: dict[int, Task] = {}
        self._next_id = 1

    def add(self, task: Task) -> Task:
        task.id, self._next_id = self._next_id, self._next_id + 1
        self._tasks[task.id] = task
        return task

    def get(self, task_id: int) -> Task | None:
        return self._tasks.get(task_id)

    def list(self, status: TaskStatus | None = None) -> list[Task]:
        return [t for t in self._tasks.values() if status is None or t.status == status]

    def save(self, task: Task) -> Task:
        assert task.id is not None
        self._tasks[task.id] = task
        return task

    def remove(self, task_id: int) -> bool:
        return self._tasks.pop(task_id, None) is not None


@pytest.fixture
def service() -> TaskService:
    return TaskService(InMemoryTaskRepository())


def test_create_task_strips_title(service: TaskService) -> None:
    task = service.create_task("  Write docs  ", priority=Priority.HIGH)
    assert task.title == "Write docs"
    assert task.status is TaskStatus.TODO


def test_update_missing_task_raises(service: TaskService) -> None:
    with pytest.raises(TaskNotFoundError):
        service.update_task(99, title="nope")


def test_overdue_ignores_done_tasks() -> None:
    past = datetime.now(timezone.utc) - timedelta(days=1)
    task = Task(title="Ship it", due_at=past)
    assert task.is_overdue()
    task.complete()
    assert not task.is_overdue()
