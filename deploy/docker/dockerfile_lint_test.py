"""hadolint (the Dockerfile linter, from the deploy venv) finds nothing in
deploy/docker/Dockerfile under deploy/docker/.hadolint.yaml, and the build
context leaves local outputs out (Dockerfile.dockerignore).

Run by //deploy/tests:run_in_venv.sh with the venv from setup_deploy_venv.sh.
"""
import os
import pathlib
import subprocess
import sys
import unittest

import junit

DOCKER = pathlib.Path(os.environ["KVCAST_DEPLOY_DIR"]) / "docker"
HADOLINT = pathlib.Path(sys.prefix) / "bin" / "hadolint"


class Hadolint(unittest.TestCase):
    def test_version(self):
        out = subprocess.run([str(HADOLINT), "--version"], capture_output=True, text=True, check=True)
        self.assertIn("2.15.1", out.stdout)

    def test_dockerfile_is_clean(self):
        res = subprocess.run([str(HADOLINT), "--no-color", "--config", str(DOCKER / ".hadolint.yaml"),
                              str(DOCKER / "Dockerfile")], capture_output=True, text=True)
        self.assertEqual(res.returncode, 0, res.stdout + res.stderr)

    def test_lint_fails_for_the_right_reason(self):
        bad = pathlib.Path(os.environ.get("TEST_TMPDIR", "/tmp")) / "Dockerfile.bad"
        bad.write_text("FROM debian:bookworm\nRUN apt-get install -y curl\n")
        res = subprocess.run([str(HADOLINT), "--no-color", "--config", str(DOCKER / ".hadolint.yaml"),
                              str(bad)], capture_output=True, text=True)
        self.assertNotEqual(res.returncode, 0)
        self.assertIn("DL3015", res.stdout)  # --no-install-recommends missing

    def test_dockerignore_keeps_outputs_out(self):
        ignored = (DOCKER / "Dockerfile.dockerignore").read_text().split()
        for entry in (".git", "bazel-*", ".venv*", "build/"):
            self.assertIn(entry, ignored)


if __name__ == "__main__":
    junit.main(__name__)
