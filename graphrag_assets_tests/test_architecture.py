"""docs/architecture.md's diagram against the code: each arrow it draws is an import the code has, and every import
between two of its rooms runs down the arrows (directly or through rooms between)."""

import ast
import re

from .workspaces import REPO

PACKAGE = REPO / "graphrag_assets"
NODE = re.compile(r'(\w+)\["([^"<]+)<br/>')
ARROW = re.compile(r"^\s*(\w+)\[.*?\]\s*-->\s*(.+)$")


def diagram() -> tuple[dict[str, list[str]], dict[str, set[str]]]:
    """The rooms (node -> the files and folders its label names) and the arrows (node -> nodes it points at)."""
    text = (REPO / "docs" / "architecture.md").read_text()
    chart = text.split("```mermaid", 1)[1].split("```", 1)[0]
    rooms = {node: [part.strip() for part in label.split(",")] for node, label in NODE.findall(chart)}
    arrows: dict[str, set[str]] = {node: set() for node in rooms}
    for line in chart.splitlines():
        if match := ARROW.match(line):
            arrows[match.group(1)] |= {target.strip() for target in match.group(2).split("&")}
    return rooms, arrows


def room_of(module: str, rooms: dict[str, list[str]]) -> str | None:
    """The room a module (a dotted name under graphrag_assets) is in, by its file or folder."""
    parts = module.split(".")[1:]
    for node, paths in rooms.items():
        for path in paths:
            if path.endswith("/") and parts[:1] == [path.rstrip("/")]:
                return node
            if path.endswith(".py") and parts == [path.removesuffix(".py")]:
                return node
    return None


def imports() -> set[tuple[str, str]]:
    """(importing module, imported module) for every import of the package by itself, relative ones resolved."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                target = ".".join([*base, *(node.module.split(".") if node.module else [])])
                found |= {(module, target)} | {(module, f"{target}.{alias.name}") for alias in node.names}
            elif isinstance(node, ast.Import):
                found |= {(module, alias.name) for alias in node.names}
    return {(a, b) for a, b in found if b.startswith("graphrag_assets.")}


def below(node: str, arrows: dict[str, set[str]]) -> set[str]:
    reached, todo = set(), [node]
    while todo:
        for target in arrows[todo.pop()] - reached:
            reached.add(target)
            todo.append(target)
    return reached


def test_the_architecture_diagram_draws_the_imports_the_code_has():
    rooms, arrows = diagram()
    assert len(rooms) >= 12 and arrows["assets"] >= {"method"}
    between = set()
    for importer, imported in imports():
        here, there = room_of(importer, rooms), room_of(imported, rooms)
        if here and there and here != there:
            between.add((here, there))
    drawn = {(node, target) for node, targets in arrows.items() for target in targets}
    assert sorted(drawn - between) == [], "arrows the code does not have"
    upward = sorted((a, b) for a, b in between if b not in below(a, arrows))
    assert upward == [], "imports the diagram does not draw (nor any path down to them)"
