"""Workflows for the continue-as-new tests: a loop that asks an agent once per round and
goes on as a new run of its lineage until its rounds are done."""

from __future__ import annotations

from typing import Any

from orchestrator import PhaseContext, Workflow, phase

PROMPT = (
    "You are the counter of a test of runs that go on as new ones. Answer with one short "
    "line of plain text that names the round that follows: "
)


class Rounds(Workflow):
    """Asks once per round; each round but the last goes on as a new run."""

    name = "lineage-rounds"
    agents = ("counter",)

    @phase(1)
    def ask(self, ctx: PhaseContext) -> dict[str, Any]:
        round_no = int(self.inputs.get("round", 1))
        said = ctx.ask("counter", PROMPT + str(round_no))
        return {"round": round_no, "said": said}

    @phase(2)
    def loop(self, ctx: PhaseContext) -> dict[str, Any]:
        round_no = int(self.inputs.get("round", 1))
        heard = [*self.inputs.get("heard", []), ctx.output("ask")["said"]]
        if round_no < int(self.inputs.get("rounds", 3)):
            ctx.continue_as_new({**self.inputs, "round": round_no + 1, "heard": heard})
        return {"heard": heard}
