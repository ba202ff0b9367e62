"""Pydantic request/response models for the HTTP API."""

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from tasktracker.domain.models import Priority, TaskStatus


class TaskCreate(BaseModel):
    title: str = Field(min_length=1, max_length=200)
    description: str = ""
    priority: Priority = Priority.MEDIUM
    due_at: datetime | None = None


class TaskUpdate(BaseModel):
    title: str | None = Field(default=None, min_length=1, max_length=200)
    description: str | None = None
    priority: Priority | None = None
    status: TaskStatus | None = None
    due_at: datetime | None = None


class TaskOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    title: str
    description: str
    priority: Priority
    status: TaskStatus
    created_at: datetime
    due_at: datetime | None


class TaskList(BaseModel):
    items: list[TaskOut]
    total: int
