"""Helpers shared by the chart tests in deploy/tests/.

- render(): the chart rendered by Helm's own Go engine (helm-python-sdk, which
  binds libhelm_c, a C ABI over Helm's SDK), offline, the way `helm template`
  does it: values.schema.json checked first, then every template.
- manifests() / objects(): the rendered output split into documents;
  objects_set(): objects() of a value set, parsed once.
- runfile(): a file outside deploy/ that the test lists in its data.
- main(): junit.main() plus the Helm engine's versions.

Runs under the venv made by setup_deploy_venv.sh (run_in_venv.sh checks it).
"""
import functools
import os
import pathlib
import shutil
import tempfile

import yaml
import helm_python as helm

import junit

DEPLOY = pathlib.Path(os.environ.get("KVCAST_DEPLOY_DIR", pathlib.Path(__file__).parent.parent))
# The runfiles tree under Bazel (the source tree when run by hand).
ROOT = DEPLOY.parent
HERE = DEPLOY / "tests"
VALUES_DIR = HERE / "values"
RELEASE, NAMESPACE = "kv", "llm"
# libyaml's parser when PyYAML has it (same results, several times faster).
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
ROLES = ("scheduler", "prefill", "decode", "relay")
# Every value set under values/, by file name without ".yaml".
VALUE_SETS = sorted(p.stem for p in VALUES_DIR.glob("*.yaml"))


@functools.lru_cache(maxsize=None)
def chart_dir() -> pathlib.Path:
    """A plain copy of the chart (the runfiles tree holds symlinks)."""
    src = DEPLOY / "helm" / "kvcast"
    dst = pathlib.Path(tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))) / "kvcast"
    shutil.copytree(src, dst, symlinks=False)
    return dst


@functools.lru_cache(maxsize=None)
def chart():
    return helm.Chart.load(str(chart_dir()))


def runfile(path: str) -> pathlib.Path:
    """A file outside deploy/ (path relative to the workspace root), read
    from the runfiles tree: the test must list it in its data in
    deploy/tests/BUILD, so that Bazel reruns the test when it changes."""
    found = ROOT / path
    if not found.is_file():
        raise FileNotFoundError(f"{found} is not in this test's runfiles: add its label to the "
                                "test's data in deploy/tests/BUILD")
    return found


def load_values(name: str) -> dict:
    return yaml.safe_load((VALUES_DIR / f"{name}.yaml").read_text()) or {}


def render(values: dict) -> dict:
    """Template path -> rendered text; raises helm.HelmError on bad values."""
    return chart().render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)


@functools.lru_cache(maxsize=None)
def render_set(name: str) -> dict:
    return render(load_values(name))


def manifests(rendered: dict) -> list:
    """(template path, YAML text) per document, as `helm template` prints them."""
    out = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in text.split("\n---"):
            doc = doc.strip().removeprefix("---").strip()
            if doc:
                out.append((path, doc + "\n"))
    return out


def objects(rendered: dict) -> list:
    return [yaml.load(doc, Loader=_YAML_LOADER) for _, doc in manifests(rendered)]


@functools.lru_cache(maxsize=None)
def objects_set(name: str) -> tuple:
    """objects() of render_set(name), parsed once: callers must not modify them."""
    return tuple(objects(render_set(name)))


def find(objs: list, kind: str, role: str = None) -> list:
    """Objects of a kind, optionally those of one role (by component label)."""
    return [o for o in objs if o["kind"] == kind and (
        role is None or o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == role)]


def the(objs: list, kind: str, role: str) -> dict:
    found = find(objs, kind, role)
    if len(found) != 1:
        raise AssertionError(f"expected one {kind} for {role}, found {len(found)}")
    return found[0]


def container(deployment: dict) -> dict:
    return deployment["spec"]["template"]["spec"]["containers"][0]


def flags(deployment: dict) -> dict:
    """--name=value flags of a Deployment's container, as a dict."""
    out = {}
    for arg in container(deployment)["args"]:
        name, _, value = arg.removeprefix("--").partition("=")
        out[name] = value
    return out


def main(module_name: str) -> None:
    print(f"helm engine: helm-python-sdk {helm.__version__}, libhelm_c "
          f"{helm.helm_c_version()}, Helm SDK {helm.helm_sdk_version()}")
    junit.main(module_name)
