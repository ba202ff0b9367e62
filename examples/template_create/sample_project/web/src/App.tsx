import { FormEvent, useEffect, useState } from "react";
import { Task, createTask, deleteTask, listTasks, updateStatus } from "./api";

export default function App() {
  const [tasks, setTasks] = useState<Task[]>([]);
  const [title, setTitle] = useState("");
  const [error, setError] = useState<string | null>(null);

  const refresh = () => listTasks().then(setTasks).catch((e: Error) => setError(e.message));

  useEffect(() => {
    refresh();
  }, []);

  async function onSubmit(event: FormEvent) {
    event.preventDefault();
    if (!title.trim()) return;
    await createTask(title.trim());
    setTitle("");
    await refresh();
  }

  return (
    <main>
      <h1>Task Tracker</h1>
      {error && <p role="alert">{error}</p>}
      <form onSubmit={onSubmit}>
        <input value={title} onChange={(e) => setTitle(e.target.value)} placeholder="New task" />
        <button type="submit">Add</button>
      </form>
      <ul>
        {tasks.map((task) => (
          <li key={task.id}>
            <input
              type="checkbox"
              checked={task.status === "done"}
              onChange={() => updateStatus(task.id, task.status === "done" ? "todo" : "done").then(refresh)}
            />
            {task.title} <small>({task.priority})</small>
            <button onClick={() => deleteTask(task.id).then(refresh)}>Delete</button>
          </li>
        ))}
      </ul>
    </main>
  );
}
