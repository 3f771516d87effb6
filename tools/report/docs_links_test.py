"""Every link in README.md and docs/*.md that points inside the repository
resolves: a relative file or image exists, and a #fragment names a heading
of the target (GitHub's anchors: lowercase, punctuation dropped but '-' and
'_', spaces to '-', repeats numbered -1, -2, ...). System python3 only.
"""
import os
import pathlib
import re
import sys
import unittest

# The checkout itself (the runfiles' README.md links to it): documents link
# to source files that are not test data.
ROOT = pathlib.Path(os.environ.get("TEST_SRCDIR", "")) / "kvcast"
if not (ROOT / "README.md").exists():
    ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
ROOT = (ROOT / "README.md").resolve().parent
sys.path.insert(0, str(ROOT / "deploy" / "tests"))
import junit  # noqa: E402

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def anchors(md_text):
    seen, out = {}, set()
    in_code = False
    for line in md_text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        title = line.lstrip("#").strip()
        slug = re.sub(r"[^\w\- ]", "", title.lower().replace("`", "")).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def documents():
    return [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))


class Links(unittest.TestCase):
    def test_anchor_slugs_follow_github(self):
        got = anchors("# A b\n## Weights at the file's precision: Q4_1 (issue 38)\n## A b\n"
                      "```\n# not a heading\n```\n## `ac` and `ac-lo`")
        self.assertEqual(got, {"a-b", "weights-at-the-files-precision-q4_1-issue-38", "a-b-1",
                               "ac-and-ac-lo"})

    def test_every_internal_link_resolves(self):
        broken = []
        for doc in documents():
            text = doc.read_text()
            for target in LINK.findall(text):
                if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                    continue
                path, _, fragment = target.partition("#")
                dest = (doc.parent / path).resolve() if path else doc
                if path and not dest.exists():
                    broken.append(f"{doc.name}: {target}: no such file")
                elif fragment and dest.suffix == ".md" and fragment not in anchors(dest.read_text()):
                    broken.append(f"{doc.name}: {target}: no such heading")
        self.assertEqual(broken, [])


if __name__ == "__main__":
    junit.main(__name__)
