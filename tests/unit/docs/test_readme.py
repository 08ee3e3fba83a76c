"""The README is the front door: short, and every link in it leads to a page of the documentation
site (mkdocs.yml's nav) or a file of the checkout, and to an anchor that page has."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import yaml
from markdown.extensions.toc import slugify

REPO = Path(__file__).resolve().parents[3]
README = REPO / "README.md"
MAX_LINES = 200


def nav_pages(nav: object) -> Iterator[str]:
    """Every page file mkdocs.yml's nav lists, at any depth."""
    if isinstance(nav, str):
        yield nav
    elif isinstance(nav, list):
        for item in nav:
            yield from nav_pages(item)
    elif isinstance(nav, dict):
        for value in nav.values():
            yield from nav_pages(value)


def anchors(page: Path) -> set[str]:
    """The ids mkdocs' toc gives the page's headings (code spans and emphasis dropped first)."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    headings = re.findall(r"^#{1,6} (.+)$", text, flags=re.M)
    return {slugify(re.sub(r"[`*]", "", h), "-") for h in headings}


def test_the_readme_stays_under_200_lines():
    lines = len(README.read_text().splitlines())
    assert lines < MAX_LINES, f"README.md has {lines} lines: move the detail to a page under docs/"


def test_every_readme_link_resolves_to_a_docs_page_in_the_site_and_its_anchor():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    docs = REPO / config["docs_dir"]
    in_nav = {docs / page for page in nav_pages(config["nav"])}
    links = re.findall(r"\]\(([^)\s]+)\)", README.read_text())
    assert len(links) > 20, links
    for link in links:
        assert "://" not in link, f"{link}: the README links to the checkout's pages, which the site is built from"
        path, _, anchor = link.partition("#")
        target = (REPO / path).resolve()
        assert target.is_file(), f"README link {link}: no file {path}"
        if target.is_relative_to(docs.resolve()):
            assert target in in_nav, f"README link {link}: {path} is not in mkdocs.yml's nav"
        if anchor:
            assert anchor in anchors(target), f"README link {link}: {path} has no heading #{anchor}"
