import pytest
from fastapi.testclient import TestClient

from tasktracker.main import create_app


@pytest.fixture
def client(tmp_path) -> TestClient:
    app = create_app(f"sqlite:///{tmp_path / 'test.db'}")
    return TestClient(app)


def test_health(client: TestClient) -> None:
    assert client.get("/health").json() == {"status": "ok"}


def test_create_and_list_tasks(client: TestClient) -> None:
    created = client.post("/api/tasks", json={"title": "Buy milk", "priority": "low"})
    assert created.status_code == 201
    body = client.get("/api/tasks").json()
    assert body["total"] == 1
    assert body["items"][0]["title"] == "Buy milk"


def test_update_unknown_task_returns_404(client: TestClient) -> None:
    response = client.patch("/api/tasks/12345", json={"status": "done"})
    assert response.status_code == 404


def test_delete_task(client: TestClient) -> None:
    task_id = client.post("/api/tasks", json={"title": "Temp"}).json()["id"]
    assert client.delete(f"/api/tasks/{task_id}").status_code == 204
    assert client.get("/api/tasks").json()["total"] == 0
