// orchestrate ui: answers checked as they are typed, confirmations, live events and boards.
// No framework and nothing fetched from elsewhere: this file ships in the package.
"use strict";

function checkAnswer(form) {
  const mode = form.querySelector("input[name=mode]:checked");
  const area = form.querySelector("textarea");
  const said = form.querySelector(".check");
  if (!mode || mode.value !== "json" || area.value.trim() === "") {
    area.classList.remove("bad"); said.classList.remove("bad"); said.textContent = "";
    return true;
  }
  try {
    JSON.parse(area.value);
    area.classList.remove("bad"); said.classList.remove("bad"); said.textContent = "valid JSON";
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
  source.onmessage = (message) => {
    const item = document.createElement("li");
    item.textContent = describe(JSON.parse(message.data));
    log.appendChild(item);
    log.scrollTop = log.scrollHeight;
  };
  source.addEventListener("end", () => {
    source.close();
    const status = document.querySelector("h1 .badge");
    if (status && status.textContent !== "completed") window.location.reload();
  });
}

const board = document.querySelector(".board[data-board]");
if (board) {
  const refresh = async () => {
    const reply = await fetch(board.dataset.board, { credentials: "same-origin" });
    if (reply.ok) board.innerHTML = (await reply.json()).html;
  };
  window.setInterval(refresh, 1000);
}
