"""The source tree a layering check reads: argv[1], or the checkout its
script is linked from (Bazel runs it from runfiles; the link leads back)."""
import os
import sys


def root(script, must_hold):
    """The tree's root, or None (after printing why) when it lacks
    `must_hold` (a top-level directory every checkout has)."""
    if len(sys.argv) > 1:
        path = sys.argv[1]
    else:
        path = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(script))))
    if not os.path.isdir(os.path.join(path, must_hold)):
        print(f"{os.path.basename(script)[:-3]}: no source tree at {path}")
        return None
    return path
