export type TaskStatus = "todo" | "in_progress" | "done";
export type Priority = "low" | "medium" | "high";

export interface Task {
  id: number;
  title: string;
  description: string;
  priority: Priority;
  status: TaskStatus;
  created_at: string;
  due_at: string | null;
}

const BASE_URL = import.meta.env.VITE_API_URL ?? "/api";

async function request<T>(path: string, init?: RequestInit): Promise<T> {
  const response = await fetch(`${BASE_URL}${path}`, {
    headers: { "Content-Type": "application/json" },
    ...init,
  });
  if (!response.ok) {
    throw new Error(`${init?.method ?? "GET"} ${path} failed: ${response.status}`);
  }
  return (response.status === 204 ? undefined : await response.json()) as T;
}

export const listTasks = () =>
  request<{ items: Task[]; total: number }>("/tasks").then((body) => body.items);

export const createTask = (title: string, priority: Priority = "medium") =>
  request<Task>("/tasks", { method: "POST", body: JSON.stringify({ title, priority }) });

export const updateStatus = (id: number, status: TaskStatus) =>
  request<Task>(`/tasks/${id}`, { method: "PATCH", body: JSON.stringify({ status }) });

export const deleteTask = (id: number) =>
  request<void>(`/tasks/${id}`, { method: "DELETE" });
