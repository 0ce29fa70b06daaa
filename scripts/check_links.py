#!/usr/bin/env python3
"""Checks that every relative link in the markdown files resolves.

    python3 scripts/check_links.py [FILE.md ...]   (default: README.md, docs/**/*.md, bench/NOTES.md)

A link [text](path) or [text](path#anchor) must name an existing file or directory,
relative to the file that holds it; an anchor must match a heading of the target (GitHub's
slugs: lower case, punctuation dropped, spaces as hyphens). Links with a scheme (https:,
mailto:) are not followed. Exits 1 and lists the broken links when there are any.
"""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def slug(heading):
    s = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()  # a link counts by its text
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    out, fenced = set(), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if FENCE.match(line):
                fenced = not fenced
            elif not fenced and line.startswith("#"):
                out.add(slug(line.lstrip("#")))
    return out


def links(path):
    fenced = False
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if FENCE.match(line):
                fenced = not fenced
                continue
            if fenced:
                continue
            for m in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
                yield n, m.group(1)


def main(files):
    if not files:
        files = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "bench", "NOTES.md")]
        files += sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
    bad = []
    for md in files:
        for n, target in links(md):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
            if not os.path.exists(dest):
                bad.append(f"{os.path.relpath(md, ROOT)}:{n}: {target}: no such file")
            elif anchor and os.path.isfile(dest) and dest.endswith(".md") and anchor not in anchors(dest):
                bad.append(f"{os.path.relpath(md, ROOT)}:{n}: {target}: no heading '{anchor}'")
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
