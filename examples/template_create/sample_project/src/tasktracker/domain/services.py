"""Use cases for tasks. The service depends only on the repository protocol."""

from typing import Any, Protocol

from tasktracker.domain.models import Task, TaskStatus


class TaskRepository(Protocol):
    def add(self, task: Task) -> Task: ...
    def get(self, task_id: int) -> Task | None: ...
    def list(self, status: TaskStatus | None = None) -> list[Task]: ...
    def save(self, task: Task) -> Task: ...
    def remove(self, task_id: int) -> bool: ...


class TaskNotFoundError(LookupError):
    def __init__(self, task_id: int) -> None:
        super().__init__(f"task {task_id} not found")
        self.task_id = task_id


class TaskService:
    def __init__(self, repository: TaskRepository) -> None:
        self._repo = repository

    def create_task(self, title: str, **fields: Any) -> Task:
        return self._repo.add(Task(title=title.strip(), **fields))

    def list_tasks(self, status: TaskStatus | None = None) -> list[Task]:
        return self._repo.list(status=status)

    def update_task(self, task_id: int, **changes: Any) -> Task:
        task = self._repo.get(task_id)
        if task is None:
            raise TaskNotFoundError(task_id)
        for name, value in changes.items():
            if value is not None:
                setattr(task, name, value)
        return self._repo.save(task)

    def delete_task(self, task_id: int) -> None:
        if not self._repo.remove(task_id):
            raise TaskNotFoundError(task_id)
