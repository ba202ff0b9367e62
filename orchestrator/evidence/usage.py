"""Tokens and cost of a run, summed from its answers' metadata.

Every answer of the agent bridge may carry ``metadata.model`` and ``metadata.tokens_used``,
and, where the agent tells them, its input and output tokens (``input_tokens`` /
``output_tokens``, or ``prompt_tokens`` / ``completion_tokens`` as the HTTP agent records
them, with or without the ``x_`` prefix of an extension field). Nothing is stored twice:
the sums are made from the recorded requests whenever they are shown.

A price list (``--prices FILE``, or a workflow's ``prices``) maps a model to its price in
US dollars per million input and output tokens: ``{"MODEL": {"input": 3.0, "output":
15.0}}``. An answer's tokens that are not split into input and output (``tokens_used``
alone, or more than the two add up to) are priced as input tokens. An answer whose model
has no price counts in the tokens, not in the cost, and its model is listed as unpriced.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from .._text import plural

__all__ = [
    "AnswerTokens",
    "Prices",
    "add_tallies",
    "answer_tokens",
    "describe_usage",
    "parse_prices",
    "tally_of",
    "tally_spent",
    "usage_of",
]

#: A price list: model -> (US dollars per million input tokens, per million output tokens).
Prices = Mapping[str, tuple[float, float]]

_INPUT_KEYS = ("input_tokens", "x_input_tokens", "prompt_tokens", "x_prompt_tokens")
_OUTPUT_KEYS = ("output_tokens", "x_output_tokens", "completion_tokens", "x_completion_tokens")


@attrs.frozen(kw_only=True)
class AnswerTokens:
    """What one answer used: its model, its input and output tokens, and its tokens not
    split into either (``tokens_used`` beyond the two)."""

    model: str | None
    input: int = 0
    output: int = 0
    unsplit: int = 0

    @property
    def total(self) -> int:
        return self.input + self.output + self.unsplit

    def cost(self, prices: Prices) -> float | None:
        """In US dollars; ``None`` when the model has no price."""
        price = prices.get(self.model or "")
        if price is None:
            return None
        return ((self.input + self.unsplit) * price[0] + self.output * price[1]) / 1_000_000


def answer_tokens(metadata: Any) -> AnswerTokens | None:
    """What the answer whose ``metadata`` (the response's ``ResponseMetadata``) used;
    ``None`` when it tells no tokens."""
    if metadata is None:
        return None
    extra = metadata.extra or {}
    given_in = _first_count(extra, _INPUT_KEYS)
    given_out = _first_count(extra, _OUTPUT_KEYS)
    total = metadata.tokens_used if _is_count(metadata.tokens_used) else None
    if total is None and given_in is None and given_out is None:
        return None
    split = (given_in or 0) + (given_out or 0)
    return AnswerTokens(
        model=metadata.model,
        input=given_in or 0,
        output=given_out or 0,
        unsplit=max((total or 0) - split, 0),
    )


def usage_of(records: Iterable[Any], *, prices: Prices | None = None) -> dict[str, Any]:
    """The tokens (and, with ``prices``, the cost) of the answers among ``records`` (the
    state's ``agent_requests``, archived ones whole again): for the run, and by phase, by
    agent and by model. JSON data."""
    run = _Bucket()
    by: dict[str, dict[str, _Bucket]] = {"phase": {}, "agent": {}, "model": {}}
    unpriced: set[str] = set()
    for record in records:
        response = record.x_response
        used = answer_tokens(None if response is None else response.metadata)
        if used is None:
            continue
        request = record.x_request
        phase = request.phase_name if request is not None else str(record.phase)
        cost = None if prices is None else used.cost(prices)
        if prices is not None and cost is None:
            unpriced.add(used.model or "(no model)")
        keys = {"phase": phase, "agent": record.agent_name, "model": used.model or "(no model)"}
        for bucket in (run, *(by[k].setdefault(v, _Bucket()) for k, v in keys.items())):
            bucket.add(used, cost)
    priced = prices is not None
    return {
        **run.data(priced),
        "by_phase": {k: v.data(priced) for k, v in by["phase"].items()},
        "by_agent": {k: v.data(priced) for k, v in by["agent"].items()},
        "by_model": {k: v.data(priced) for k, v in by["model"].items()},
        **({"unpriced_models": sorted(unpriced)} if priced else {}),
    }


def tally_of(records: Iterable[Any]) -> dict[str, dict[str, int]]:
    """The tokens of the answers among ``records`` by model (``{"input", "output",
    "unsplit", "answers"}`` each): all a budget needs of answers whose text has left the
    state (the engine keeps this of the requests it moves to the run's history)."""
    tally: dict[str, dict[str, int]] = {}
    for record in records:
        response = record.x_response
        used = answer_tokens(None if response is None else response.metadata)
        if used is None:
            continue
        part = tally.setdefault(used.model or "", dict.fromkeys(_TALLY_KEYS, 0))
        part["input"] += used.input
        part["output"] += used.output
        part["unsplit"] += used.unsplit
        part["answers"] += 1
    return tally


def add_tallies(*tallies: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """The sum of :func:`tally_of`'s results."""
    total: dict[str, dict[str, int]] = {}
    for tally in tallies:
        for model, part in tally.items():
            into = total.setdefault(model, dict.fromkeys(_TALLY_KEYS, 0))
            for key in _TALLY_KEYS:
                into[key] += int(part.get(key, 0))
    return total


def tally_spent(
    tally: Mapping[str, Mapping[str, int]], prices: Prices
) -> tuple[int, float, list[str]]:
    """A tally's tokens, its cost in US dollars, and its models that have no price."""
    tokens, cost, unpriced = 0, 0.0, []
    for model, part in tally.items():
        used = AnswerTokens(
            model=model or None,
            input=part["input"],
            output=part["output"],
            unsplit=part["unsplit"],
        )
        tokens += used.total
        priced = used.cost(prices)
        if priced is None:
            unpriced.append(model or "(no model)")
        else:
            cost += priced
    return tokens, cost, unpriced


_TALLY_KEYS = ("input", "output", "unsplit", "answers")


def describe_usage(usage: dict[str, Any]) -> list[str]:
    """``usage_of``'s sums for a person: the run's line, then one per phase and agent."""
    if not usage.get("answers"):
        return []
    lines = [f"tokens     {_line(usage)}"]
    lines += [f"  phase    {name}: {_line(part)}" for name, part in usage["by_phase"].items()]
    lines += [f"  agent    {name}: {_line(part)}" for name, part in usage["by_agent"].items()]
    if usage.get("unpriced_models"):
        lines.append(f"  no price {', '.join(usage['unpriced_models'])}")
    return lines


def _line(part: dict[str, Any]) -> str:
    text = f"{part['tokens']} ({part['input_tokens']} in, {part['output_tokens']} out"
    text += f", {plural(part['answers'], 'answer')})"
    if "cost_usd" in part:
        text += f"  ${part['cost_usd']:.4f}"
    return text


def parse_prices(data: Any, *, source: str) -> dict[str, tuple[float, float]]:
    """A price list from JSON data (``{"MODEL": {"input": USD, "output": USD}}``, per
    million tokens); anything else raises ``ValueError`` naming the entry and what to
    write (the caller adds where the list came from)."""
    if not isinstance(data, dict):
        raise ValueError(
            f"{source}: a price list is a JSON object of model -> "
            '{"input": USD per million tokens, "output": USD per million tokens}'
        )
    prices: dict[str, tuple[float, float]] = {}
    for model, price in data.items():
        pair = []
        for side in ("input", "output"):
            value = price.get(side) if isinstance(price, dict) else None
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value < 0
            ):
                raise ValueError(
                    f"{source}: {model!r}.{side} must be a number >= 0 (US dollars per "
                    "million tokens); write it, or leave the model out"
                )
            pair.append(float(value))
        prices[str(model)] = (pair[0], pair[1])
    return prices


@attrs.define
class _Bucket:
    answers: int = 0
    input: int = 0
    output: int = 0
    unsplit: int = 0
    cost: float = 0.0

    def add(self, used: AnswerTokens, cost: float | None) -> None:
        self.answers += 1
        self.input += used.input
        self.output += used.output
        self.unsplit += used.unsplit
        self.cost += cost or 0.0

    def data(self, priced: bool) -> dict[str, Any]:
        part: dict[str, Any] = {
            "tokens": self.input + self.output + self.unsplit,
            "input_tokens": self.input,
            "output_tokens": self.output,
            "answers": self.answers,
        }
        if priced:
            part["cost_usd"] = round(self.cost, 6)
        return part


def _first_count(extra: Mapping[str, Any], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        if _is_count(extra.get(key)):
            return int(extra[key])
    return None


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
