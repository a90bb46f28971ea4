"""The operator's pages: the configuration reference is the schema's own (made by `make docs`),
and every link between the README and docs/ leads somewhere (a file that exists, a heading
that is there)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lab.configdoc import OUT, page

REPO = Path(__file__).resolve().parent.parent


PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def test_the_configuration_reference_is_made_from_the_schema() -> None:
    assert OUT.read_text() == page(), "docs/configuration.md is stale: run make docs"


def slugs(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings (lowercase, punctuation dropped, spaces to
    hyphens, -1, -2 for repeats)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        title = line.lstrip("#").strip().lower()
        slug = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


@pytest.mark.parametrize("source", PAGES, ids=lambda p: p.name)
def test_every_link_between_the_pages_leads_somewhere(source: Path) -> None:
    text = source.read_text()
    broken = []
    for target in LINK.findall(re.sub(r"```.*?```", "", text, flags=re.S)):
        if re.match(r"[a-z]+:", target):  # http(s), mailto: not checked offline
            continue
        path, _, anchor = target.partition("#")
        where = (source.parent / path).resolve() if path else source
        if not where.exists():
            broken.append(f"{target}: no such file")
        elif anchor and where.suffix == ".md" and anchor not in slugs(where.read_text()):
            broken.append(f"{target}: no such heading")
    assert broken == [], f"{source.name}: {broken}"


def test_the_link_check_finds_a_heading_that_is_not_there(tmp_path: Path) -> None:
    page_ = tmp_path / "page.md"
    page_.write_text(
        "# Scale-out: active-active\n## Faults survived\n## Faults survived\n"
        "[a](#scale-out-active-active) [b](#faults-survived-1) [c](#nowhere)\n"
        "[d](missing.md)\n"
    )
    with pytest.raises(AssertionError, match=r"#nowhere: no such heading.*missing.md: no such"):
        test_every_link_between_the_pages_leads_somewhere(page_)


def test_the_design_page_names_each_library_where_the_code_imports_it() -> None:
    """docs/design.md says where each third-party library lives; the code is read for where
    it is imported, and each place it names must be the one (issue 72: the page said three
    adapters imported kubernetes, which one did)."""
    import ast

    root = Path(__file__).resolve().parents[1]
    places = {
        "kubernetes": {"adapters/kube/client.py"},
        "flask": {"web/"},
        "werkzeug": {"web/"},
        "yaml": {"schema/"},
        "pydantic": {"schema/"},
        "jinja2": {"adapters/render.py"},
        "hypercorn": {"adapters/http/server.py"},
        "a2wsgi": {"adapters/http/server.py"},
    }
    found: dict[str, set[str]] = {library: set() for library in places}
    for path in (root / "director").rglob("*.py"):
        where = path.relative_to(root / "director").as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            for name in names:
                if name.split(".")[0] in found:
                    found[name.split(".")[0]].add(where)
    for library, named in places.items():
        for place in found[library]:
            assert any(place.startswith(p) for p in named), (library, place)
        assert found[library], f"{library} is imported nowhere"
    text = " ".join((root / "docs" / "design.md").read_text().split())
    for library, named in places.items():
        for place in named:
            assert f"`{place}`" in text, (library, place)
