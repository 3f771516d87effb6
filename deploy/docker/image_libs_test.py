"""The images cannot be built here (no container engine), so this checks what
can be checked without one:

- ldd of every image binary built in this tree: each library resolves, and
  the Debian package that owns it (dpkg -S) is in its runtime stage's list
  (packages-runtime-cpu.txt / -gpu.txt), or, for CUDA, its soname is in
  cuda-runtime-libs.txt; and each list holds nothing that no binary loads.
- the Dockerfile: a target per role on the right runtime stage, each copying
  its binary and running as uid 10001; the health check; the build stage
  reading kvcast.sh's APT_PACKAGES (run here on kvcast.sh, from this
  test's data); every image binary among the default build targets.

Every image binary must be in this test's data (deploy/docker/BUILD); one
missing fails its case. System python3 only (no venv): run by
image_libs_test.sh.
"""
import functools
import os
import pathlib
import re
import subprocess
import sys
import unittest

ROOT = pathlib.Path(os.environ.get("KVCAST_ROOT", pathlib.Path(__file__).parent.parent.parent))
DOCKER = ROOT / "deploy" / "docker"
# Where built binaries are (the runfiles tree under Bazel; bazel-bin by hand).
BIN_ROOT = pathlib.Path(os.environ.get("KVCAST_BIN_ROOT", ROOT))
sys.path.insert(0, str(ROOT / "deploy" / "tests"))
import junit  # noqa: E402

# binary -> (Bazel label, runtime stage, image targets that ship it)
IMAGE_BINARIES = {
    "kvcast-scheduler": ("//services/scheduler:kvcast-scheduler", "cpu", ["scheduler"]),
    "kvcast-relay": ("//services/relay:kvcast-relay", "cpu", ["relay"]),
    "kvcast-prefill": ("//services/prefill:kvcast-prefill", "gpu", ["prefill"]),
    "kvcast-decode": ("//services/decode:kvcast-decode", "gpu", ["decode"]),
    "kvcast": ("//tools/cli:kvcast", "gpu", ["prefill", "decode"]),
}
CUDA_DIRS = ("/usr/local/cuda",)


def label_path(label: str) -> pathlib.Path:
    package, _, name = label.removeprefix("//").partition(":")
    return BIN_ROOT / package / name


def read_list(name: str) -> set:
    lines = (DOCKER / name).read_text().splitlines()
    return {ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")}


def ldd(binary: pathlib.Path) -> dict:
    """soname -> resolved path (None when not found)."""
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout
    libs = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (not found|(\S+))", line)
        if m:
            libs[m.group(1)] = m.group(3)
    return libs


def owners(paths) -> dict:
    """path -> Debian package that owns it (merged /usr tried both ways)."""
    candidates = {}
    for p in paths:
        real = os.path.realpath(p)
        alts = {p, real}
        for q in (p, real):
            alts.add(q[4:] if q.startswith("/usr/") else "/usr" + q)
        candidates[p] = alts
    allpaths = sorted(set().union(*candidates.values())) if candidates else []
    res = subprocess.run(["dpkg", "-S"] + allpaths, capture_output=True, text=True)
    owner = {}
    for line in res.stdout.splitlines():
        pkgs, _, path = line.partition(": ")
        if "diversion" not in pkgs:
            owner[path.strip()] = pkgs.split(",")[0].split(":")[0].strip()
    return {p: next((owner[a] for a in sorted(alts) if a in owner), None)
            for p, alts in candidates.items()}


@functools.lru_cache(maxsize=None)
def scan(binary: str):
    """(libs, CUDA sonames, Debian package per library path) of a built binary."""
    libs = ldd(label_path(IMAGE_BINARIES[binary][0]))
    cuda = {so for so, p in libs.items() if p and p.startswith(CUDA_DIRS)}
    owner = owners(p for so, p in libs.items() if p and so not in cuda)
    return libs, cuda, owner


def built(stage: str) -> list:
    return [b for b, (label, st, _) in IMAGE_BINARIES.items()
            if st == stage and label_path(label).is_file()]


class Binaries(unittest.TestCase):
    """ldd of each image binary against its stage's lists (one case each)."""

    def check_binary(self, binary):
        label, stage, _ = IMAGE_BINARIES[binary]
        self.assertTrue(label_path(label).is_file(),
                        f"{binary} is not in this test's runfiles: add {label} to the data of "
                        "//deploy/docker:image_libs_test")
        libs, cuda, owner = scan(binary)
        self.assertEqual(sorted(so for so, p in libs.items() if p is None), [],
                         f"{binary}: libraries not found")
        self.assertEqual(sorted(p for p, pkg in owner.items() if pkg is None), [],
                         f"{binary}: libraries no Debian package owns")
        packages = set(owner.values())
        self.assertEqual(sorted(packages - read_list(f"packages-runtime-{stage}.txt")), [],
                         f"{binary} loads libraries of these packages; add them to "
                         f"deploy/docker/packages-runtime-{stage}.txt")
        self.assertTrue(stage == "gpu" or not cuda, f"{binary} links CUDA but is a CPU image")
        self.assertEqual(sorted(cuda - read_list("cuda-runtime-libs.txt")), [],
                         f"{binary}: add these to deploy/docker/cuda-runtime-libs.txt")
        print(f"checked {binary} ({stage} stage): {len(libs)} libraries from "
              f"{len(packages)} Debian packages{', CUDA: ' + ' '.join(sorted(cuda)) if cuda else ''}")


for _b in IMAGE_BINARIES:
    setattr(Binaries, f"test_ldd_{_b.replace('-', '_')}",
            lambda self, b=_b: self.check_binary(b))


class PackageLists(unittest.TestCase):
    """Each list holds nothing that no built binary of its stage loads."""

    def exact(self, stage):
        binaries = built(stage)
        if not binaries:
            self.skipTest(f"no {stage} image binary is built yet")
        loaded = set().union(*(set(scan(b)[2].values()) for b in binaries))
        extra = read_list(f"packages-runtime-{stage}.txt") - loaded
        self.assertEqual(sorted(extra), [],
                         f"packages-runtime-{stage}.txt lists packages that none of {binaries} loads")

    def test_cpu_list_is_exact(self):
        self.exact("cpu")

    def test_gpu_list_is_exact(self):
        self.exact("gpu")

    def test_cuda_list_is_exact(self):
        binaries = built("gpu")
        cuda = set().union(set(), *(scan(b)[1] for b in binaries))
        if not cuda:
            self.skipTest(f"no built GPU-image binary ({binaries}) links CUDA yet: "
                          "cuda-runtime-libs.txt is checked only against the toolkit")
        self.assertEqual(read_list("cuda-runtime-libs.txt"), cuda)

    def test_cuda_libs_match_the_toolkit_the_dockerfile_names(self):
        version = re.search(r"^ARG CUDA_VERSION=(\d+)\.", dockerfile(), re.M).group(1)
        for so in read_list("cuda-runtime-libs.txt"):
            self.assertTrue(so.endswith(f".so.{version}"), f"{so}: the Dockerfile says CUDA {version}")
        lib64 = pathlib.Path("/usr/local/cuda/lib64")
        if not lib64.is_dir():
            self.skipTest("no CUDA toolkit here to compare the sonames with")
        for so in read_list("cuda-runtime-libs.txt"):
            self.assertTrue((lib64 / so).exists(), f"{so} is not in {lib64}")


def dockerfile() -> str:
    return (DOCKER / "Dockerfile").read_text()


def stages() -> dict:
    """stage name -> (base, body lines)."""
    out, name = {}, None
    for line in dockerfile().splitlines():
        m = re.match(r"FROM\s+(\S+)\s+AS\s+(\S+)", line)
        if m:
            name = m.group(2)
            out[name] = (m.group(1), [])
        elif name:
            out[name][1].append(line)
    return out


class Dockerfile(unittest.TestCase):
    def test_role_targets(self):
        s = stages()
        for role, base in (("scheduler", "runtime-cpu"), ("relay", "runtime-cpu"),
                           ("prefill", "runtime-gpu"), ("decode", "runtime-gpu")):
            self.assertEqual(s[role][0], base, role)
            body = "\n".join(s[role][1])
            self.assertIn("USER 10001:10001", body, role)
            self.assertIn(f'ENTRYPOINT ["/usr/local/bin/kvcast-{role}"]', body)
            for binary, (_, stage, targets) in IMAGE_BINARIES.items():
                if role in targets:
                    self.assertRegex(body, rf"COPY --from=build .*/out/{binary}\b", role)
                    self.assertEqual(base, f"runtime-{stage}", binary)

    def test_runtime_stages_install_their_lists(self):
        s = stages()
        for stage in ("cpu", "gpu"):
            body = "\n".join(s[f"runtime-{stage}"][1])
            self.assertEqual(s[f"runtime-{stage}"][0], "runtime-base")
            self.assertIn(f"COPY deploy/docker/packages-runtime-{stage}.txt", body)
        self.assertIn("COPY --from=cuda-libs /out/ /usr/local/cuda/lib64/",
                      "\n".join(s["runtime-gpu"][1]))
        self.assertIn("cuda-runtime-libs.txt", "\n".join(s["cuda-libs"][1]))

    def test_non_root_user_and_health_check(self):
        body = "\n".join(stages()["runtime-base"][1])
        self.assertIn("useradd --system --uid 10001", body)
        self.assertIn("HEALTHCHECK", body)
        self.assertIn("/dev/tcp/127.0.0.1/${KVCAST_METRICS_PORT}", body)

    def test_build_stage_uses_kvcast_sh_packages(self):
        body = "\n".join(stages()["build"][1])
        self.assertEqual(stages()["build"][0], "debian:${DEBIAN_RELEASE}")
        cmd = re.search(r'eval "\$\((sed .*?kvcast\.sh)\)"', body).group(1)
        # //:kvcast.sh is in this test's data.
        cmd = cmd.replace("/src/kvcast.sh", str(ROOT / "kvcast.sh"))
        def listed(array):
            return subprocess.run(["bash", "-c", f'eval "$({cmd})"; printf "%s\\n" "${{{array}[@]}}"'],
                                  capture_output=True, text=True, check=True).stdout.split()
        got = listed("APT_PACKAGES")
        for pkg in ("bazel-bootstrap", "libabsl-dev", "libgrpc++-dev"):
            self.assertIn(pkg, got)
        self.assertIn('"${APT_PACKAGES[@]}"', body)
        # ngtcp2 1.x from the backports suite, which the stage adds first.
        self.assertIn("libngtcp2-dev", listed("BACKPORTS_PACKAGES"))
        self.assertIn('-backports" "${BACKPORTS_PACKAGES[@]}"', body)
        self.assertLess(body.index("apt_backports.sh"), body.index("BACKPORTS_PACKAGES[@]"))

    def test_runtime_stages_can_install_backports_libraries(self):
        body = "\n".join(stages()["runtime-base"][1])
        self.assertIn("COPY tools/setup/apt_backports.sh", body)
        self.assertIn("RUN apt_backports.sh", body)

    def test_build_targets_cover_every_image_binary(self):
        targets = re.search(r'^ARG KVCAST_TARGETS="([^"]*)"', dockerfile(), re.M).group(1).split()
        self.assertEqual(sorted(targets), sorted(v[0] for v in IMAGE_BINARIES.values()))


if __name__ == "__main__":
    junit.main(__name__)
