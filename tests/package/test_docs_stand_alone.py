"""The documentation stands alone: every relative link in the README, the changelog and
docs/ reaches a file of the repository (and a heading of it, when it names one), and no
page points to a contract document kept outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]


def anchors(page: Path) -> set[str]:
    """The heading anchors a Markdown renderer makes (GitHub's rule): lower case, spaces to
    hyphens, everything but letters, digits, hyphens and underscores dropped."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+?)\s*$", text, flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        found.add(slug)
    return found


def test_no_file_refers_to_a_contract_outside_the_repository() -> None:
    # every file of the repository: code, SQL, tests and docs cite docs/reference.md, never
    # a document that only the team has
    skipped = {
        ".git",
        ".venv",
        "dist",
        "__pycache__",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
    }
    named = []
    for path in ROOT.rglob("*"):
        if skipped.intersection(path.relative_to(ROOT).parts) or not path.is_file():
            continue
        if path.suffix in {".png", ".whl", ".pyc"}:
            continue
        if re.search(r"\bAPI\.md\b", path.read_text(encoding="utf-8", errors="replace")):
            named.append(str(path.relative_to(ROOT)))
    assert named == []


def test_every_relative_link_reaches_a_file_and_its_heading() -> None:
    broken: list[str] = []
    for page in pages():
        text = FENCE.sub("", page.read_text(encoding="utf-8"))
        for target in LINK.findall(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
                continue
            path_part, _, anchor = target.partition("#")
            linked = (page.parent / path_part).resolve() if path_part else page
            if not linked.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def test_the_readme_is_a_front_door_and_the_changelog_says_nothing_is_published() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    assert "./scripts/dev" in readme and "./scripts/test" in readme
    for function_file in sorted((ROOT / "api").glob("*.py")):
        assert f"`api/{function_file.name}`" in readme, f"Deploy does not list {function_file}"
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## [Unreleased]" in changelog
    assert "No release has been published yet" in changelog


# where code, SQL, tests and docs cite the reference (a "§N" or "reference.md ... section N")
CITING = ("lib", "tests", "bench", "docs", "examples", "functions", "api", "sql", "scripts")
SECTION_SIGN = re.compile(r"(\S*)\s*§\s*(\d+)(?:\s*-\s*(\d+))?")
NAMED_SECTION = re.compile(r"reference(?:\.md)?\]?(?:\([^)]*\))?,? sections? (\d+)")


def reference_sections() -> set[int]:
    text = FENCE.sub("", (ROOT / "docs" / "reference.md").read_text(encoding="utf-8"))
    numbered = {int(n) for n in re.findall(r"^## (\d+)\. ", text, flags=re.MULTILINE)}
    # section 8 (job records) is a part of section 2, as the reference's own index says
    if "Section 8, job records, lives inside section 2" in text:
        numbered.add(8)
    return numbered


def test_every_section_cited_is_a_section_of_the_reference() -> None:
    # "§N" always says whose section it is ("docs/reference.md §N", or an RFC's), and every
    # number cited names a section docs/reference.md has: a citation a reader can follow
    sections = reference_sections()
    assert {1, 2, 10, 11} <= sections  # the parse works
    wrong: list[str] = []
    for tree in CITING:
        for path in sorted((ROOT / tree).rglob("*")):
            if not path.is_file() or path.suffix not in {".py", ".md", ".sql", ".toml", ""}:
                continue
            if "__pycache__" in path.parts:
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                where = f"{path.relative_to(ROOT)}:{number}"
                cited: list[int] = []
                for match in SECTION_SIGN.finditer(line):
                    owner, first, last = match.groups()
                    if re.search(r"RFC \d+\s*$", line[: match.start(2)].rstrip("§ ")):
                        continue  # a standard's section, not ours
                    if not owner.endswith("reference.md"):
                        wrong.append(f"{where}: '§{first}' does not say whose section it is")
                    cited += range(int(first), int(last or first) + 1)
                cited += [int(n) for n in NAMED_SECTION.findall(line)]
                wrong += [f"{where}: no section {n} in docs/reference.md" for n in cited
                          if n not in sections]  # fmt: skip
    assert wrong == []
