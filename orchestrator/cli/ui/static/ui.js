// orchestrate ui: answers checked as they are typed, confirmations, live events and boards.
// No framework and nothing fetched from elsewhere: this file ships in the package.
"use strict";

function described(kind) {
  const names = { object: "an object", array: "a list", integer: "an integer" };
  return names[kind] || "a " + kind;
}

// The first way `value` differs from `schema` (the request's x_answer_schema: type,
// properties, required, additionalProperties with x_ fields allowed, items, enum, anyOf).
function shapeProblem(value, schema, path) {
  if (!schema || typeof schema !== "object") return null;
  if (Array.isArray(schema.anyOf)) {
    const fits = schema.anyOf.some((option) => shapeProblem(value, option, path) === null);
    return fits ? null : `${path}: not any of the shapes it may have`;
  }
  if (Array.isArray(schema.enum) && !schema.enum.includes(value)) {
    return `${path}: one of ${JSON.stringify(schema.enum)}`;
  }
  const kind = Array.isArray(value) ? "array" : value === null ? "null" : typeof value;
  const wanted = schema.type;
  if (wanted) {
    const ok = wanted === kind || (wanted === "integer" && Number.isInteger(value)) ||
      (wanted === "number" && kind === "number");
    if (!ok) return `${path}: expected ${described(wanted)}, got ${kind}`;
  }
  if (kind === "object") {
    for (const name of schema.required || []) {
      if (!(name in value)) return `${path}: missing "${name}"`;
    }
    const known = schema.properties || {};
    for (const [name, inner] of Object.entries(value)) {
      if (name in known) {
        const problem = shapeProblem(inner, known[name], `${path}.${name}`);
        if (problem) return problem;
      } else if (schema.additionalProperties === false && !name.startsWith("x_")) {
        return `${path}: unknown field "${name}"`;
      }
    }
  }
  if (kind === "array" && schema.items) {
    for (let i = 0; i < value.length; i++) {
      const problem = shapeProblem(value[i], schema.items, `${path}[${i}]`);
      if (problem) return problem;
    }
  }
  return null;
}

function checkAnswer(form) {
  const mode = form.querySelector("input[name=mode]:checked");
  const area = form.querySelector("textarea");
  const said = form.querySelector(".check");
  if (!mode || mode.value !== "json" || area.value.trim() === "") {
    area.classList.remove("bad"); said.classList.remove("bad"); said.textContent = "";
    return true;
  }
  try {
    const value = JSON.parse(area.value);
    const schema = form.dataset.schema ? JSON.parse(form.dataset.schema) : null;
    const problem = shapeProblem(value, schema, "$");
    if (problem) {
      area.classList.add("bad"); said.classList.add("bad");
      said.textContent = "JSON, but not the shape this request asks for: " + problem;
      return false;
    }
    area.classList.remove("bad"); said.classList.remove("bad");
    said.textContent = schema ? "valid JSON of the expected shape" : "valid JSON";
    return true;
  } catch (error) {
    area.classList.add("bad"); said.classList.add("bad");
    said.textContent = "not JSON yet: " + error.message;
    return false;
  }
}

for (const form of document.querySelectorAll("form.answer")) {
  form.addEventListener("input", () => checkAnswer(form));
  checkAnswer(form);
}

for (const form of document.querySelectorAll("form[data-confirm]")) {
  form.addEventListener("submit", (event) => {
    if (!window.confirm(form.dataset.confirm)) event.preventDefault();
  });
}

function describe(event) {
  const data = event.data || {};
  const what = data.skill || data.agent || data.status || data.workflow || "";
  return `${event.x_seq}  ${(event.ts || "").slice(11, 23)}  ${event.event}  ${what}`;
}

const log = document.querySelector("ol.events[data-stream]");
if (log) {
  const source = new EventSource(log.dataset.stream);
  log.scrollTop = log.scrollHeight;
  const typing = () => [...document.querySelectorAll("textarea")].some((t) => t.value.trim());
  source.onmessage = (message) => {
    const event = JSON.parse(message.data);
    const item = document.createElement("li");
    item.textContent = describe(event);
    log.appendChild(item);
    log.scrollTop = log.scrollHeight;
    // The run paused again or ended: show what it waits for now (never over a draft).
    if ((event.event === "run.pause" || event.event === "run.end") && !typing()) {
      source.close();
      window.location.reload();
    }
  };
  source.addEventListener("end", () => source.close());
}

const board = document.querySelector(".board[data-board]");
if (board) {
  const refresh = async () => {
    const reply = await fetch(board.dataset.board, { credentials: "same-origin" });
    if (reply.ok) board.innerHTML = (await reply.json()).html;
  };
  window.setInterval(refresh, 1000);
}

// A run asleep on a timer: a countdown to its wake time; with "resume" ticked, once due
// the page asks the server to resume it (the server checks that it is due). Ticking or
// unticking the box tells the server at once.
function left(seconds) {
  if (seconds <= 0) return "due now";
  const h = Math.floor(seconds / 3600), m = Math.floor((seconds % 3600) / 60);
  const s = Math.floor(seconds % 60);
  const parts = h ? [`${h} h`, `${m} min`] : m ? [`${m} min`, `${s} s`] : [`${s} s`];
  return "in " + parts.join(" ");
}

for (const form of document.querySelectorAll("form.wake[data-wake]")) {
  const wake = Date.parse(form.dataset.wake);
  const shown = form.querySelector(".countdown");
  const box = form.querySelector("input[name=resume]");
  let sent = false;
  const send = () => { if (!sent) { sent = true; form.requestSubmit(); } };
  box.addEventListener("change", send);
  const tick = () => {
    const seconds = (wake - Date.now()) / 1000;
    shown.textContent = left(Math.ceil(seconds));
    if (seconds <= 0 && box.checked) send();
  };
  tick();
  window.setInterval(tick, 250);
}
