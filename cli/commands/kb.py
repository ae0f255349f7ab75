"""``shardplan kb``: the knowledge base from the command line."""

from __future__ import annotations

from typing import Annotated

import typer

from shardplan.cli.app import app, console, emit_json, fail
from shardplan.cli.common import JsonFlag
from shardplan.contracts.strategy import DEGREE_KEYS, parse_strategy
from shardplan.errors import InputError
from shardplan.knowledge.retriever import search, sections_for_strategy
from shardplan.knowledge.rules import get_rule, load_rules

kb_app = typer.Typer(help="Search the knowledge base and read its rules.", no_args_is_help=True)
app.add_typer(kb_app, name="kb")


@kb_app.command("search")
def kb_search_command(
    query: Annotated[
        str | None, typer.Argument(help="Free text, e.g. 'why does the all-reduce block the residual add'.")
    ] = None,
    strategy: Annotated[
        str | None,
        typer.Option("--strategy", "-s", help="Instead of text: the sections a strategy SPEC must respect."),
    ] = None,
    moe: Annotated[bool, typer.Option("--moe", help="With --strategy: the model is a mixture of experts.")] = False,
    k: Annotated[int, typer.Option("--k", "-k", min=1, max=50, help="How many sections to return.")] = 5,
    as_json: JsonFlag = False,
) -> None:
    """The knowledge sections that best match QUERY (BM25), or that a --strategy must respect."""

    if strategy is not None:
        parsed = parse_strategy(strategy)
        degrees = {
            phase: {key: getattr(getattr(parsed, phase), key) for key in DEGREE_KEYS} for phase in ("prefill", "decode")
        }
        sections = sections_for_strategy(degrees["prefill"], degrees["decode"], moe=moe or parsed.decode.ep > 1)
        query = f"strategy {parsed.to_spec()}"
    elif query is None:
        fail("give a QUERY or --strategy SPEC")
    else:
        sections = search(query, k=k)
    if as_json:
        emit_json([section.model_dump(mode="json") for section in sections])
        return
    out = console()
    if not sections:
        out.print(f"no section matches '{query}'")
    for section in sections:
        rules = f"  rules: {', '.join(section.rule_ids)}" if section.rule_ids else ""
        score = f" (score {section.score:.2f})" if section.score else ""
        out.print(f"[bold]{section.doc} § {section.heading}[/bold]{score}{rules}")
        out.print(section.text.strip()[:600] + ("..." if len(section.text.strip()) > 600 else ""))
        out.print()


@kb_app.command("rule")
def kb_rule_command(
    rule_id: Annotated[str, typer.Argument(help="A rule ID such as DEC-1, TP-2 or SP-1.")],
    as_json: JsonFlag = False,
) -> None:
    """One rule: its text, severity and where it is written."""

    try:
        rule = get_rule(rule_id)
    except KeyError as exc:
        raise InputError(
            str(exc.args[0] if exc.args else exc), field="rule_id", fix="list them with shardplan kb rules"
        ) from None
    if as_json:
        emit_json(rule.model_dump(mode="json"))
        return
    console().print(f"[bold]{rule.id}[/bold] ({rule.severity}), {rule.doc} § {rule.section}\n{rule.text}")


@kb_app.command("rules")
def kb_rules_command(as_json: JsonFlag = False) -> None:
    """Every rule ID with its severity and document."""

    rules = load_rules()
    if as_json:
        emit_json([rule.model_dump(mode="json") for rule in rules.values()])
        return
    from rich.table import Table

    table = Table("rule", "severity", "document", "statement")
    for rule in rules.values():
        table.add_row(rule.id, rule.severity, rule.doc, rule.text)
    console().print(table)
