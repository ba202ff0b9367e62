"""A malformed workflow class fails when it is defined, with a message naming the problem."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator import Workflow, WorkflowDefinitionError, phase


def define(name: str = "good-name", agents: tuple[str, ...] = ("agent-a",), **members: Any) -> type:
    return type("W", (Workflow,), {"name": name, "agents": agents, **members})


def one(self: Any, ctx: Any) -> None:
    return None


def two(self: Any, ctx: Any) -> None:
    return None


def test_a_good_definition_lists_its_phases_in_order() -> None:
    cls = define(first=phase(1)(one), second=phase(3, name="later")(two))
    assert [(p.number, p.name) for p in cls.phases] == [(1, "first"), (3, "later")]
    assert cls.max_phase() == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "Bad_Name"}, "kebab-case"),
        ({"agents": ("Agent A",)}, "kebab-case agent names"),
        ({"agents": ("a", "a")}, "lists a name twice"),
        ({"agents": "solo"}, "tuple of kebab-case"),
    ],
)
def test_bad_names_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(WorkflowDefinitionError, match=message):
        define(**{"first": phase(1)(one), **kwargs})


def test_no_phases_is_refused() -> None:
    with pytest.raises(WorkflowDefinitionError, match="no phases"):
        define()


def test_phases_out_of_order_or_duplicated_are_refused() -> None:
    with pytest.raises(WorkflowDefinitionError, match="does not follow"):
        define(first=phase(2)(one), second=phase(1)(two))
    with pytest.raises(WorkflowDefinitionError, match="does not follow"):
        define(first=phase(1)(one), second=phase(1)(two))
    with pytest.raises(WorkflowDefinitionError, match="share this name"):
        define(first=phase(1, name="same")(one), second=phase(2, name="same")(two))


def test_bad_phase_names_and_numbers_are_refused() -> None:
    with pytest.raises(WorkflowDefinitionError, match="snake_case"):
        define(first=phase(1, name="Not-Snake")(one))
    with pytest.raises(WorkflowDefinitionError, match="must not start with 'x_'"):
        define(first=phase(1, name="x_private")(one))
    with pytest.raises(WorkflowDefinitionError, match=">= 1"):
        define(first=phase(0)(one))


def test_wrong_signatures_are_refused() -> None:
    def no_ctx(self: Any) -> None:
        return None

    with pytest.raises(WorkflowDefinitionError, match=r"take \(self, ctx\)"):
        define(first=phase(1)(no_ctx))
    with pytest.raises(WorkflowDefinitionError, match="is not a method"):
        define(first=phase(1, fallback="missing")(one))
    with pytest.raises(WorkflowDefinitionError, match=r"take \(self, ctx, error\)"):
        define(first=phase(1, fallback="fb")(one), fb=two)


def test_abstract_bases_are_not_checked_and_subclasses_inherit_phases() -> None:
    class Base(Workflow, abstract=True):
        agents = ("agent-a",)

        @phase(1)
        def shared(self, ctx: Any) -> None:
            return None

    class Child(Base):
        name = "child"

        @phase(2)
        def own(self, ctx: Any) -> None:
            return None

    assert [p.name for p in Child.phases] == ["shared", "own"]
