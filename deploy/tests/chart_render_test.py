"""The chart renders, offline, with Helm's own engine for every value set in
values/, and what it renders is valid: `helm lint --strict`, yamllint, and
the Kubernetes OpenAPI schemas (kubernetes-validate, strict: unknown fields
are errors) of the oldest Kubernetes the chart supports and the newest one
kubernetes-validate knows.

Run by run_in_venv.sh with the venv from setup_deploy_venv.sh.
"""
import json
import pathlib
import unittest

import helm_python as helm
import jsonschema
import kubernetes_validate
import yaml
from yamllint import config as yl_config, linter as yl_linter

import kvtest

KUBE_VERSIONS = ("1.27", kubernetes_validate.utils.latest_version())
# Kinds kubernetes-validate has no schema for (CRDs): chart_mapping_test.py
# checks their shape, and those with a schema under schemas/ (KEDA's
# ScaledObject, from its documentation) are validated against it.
CRD_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor"): None,
             ("keda.sh/v1alpha1", "ScaledObject"): "keda_scaledobject.schema.json"}
YAMLLINT = yl_config.YamlLintConfig(file=str(kvtest.HERE / "yamllint.yaml"))


def lint_yaml(text: str, name: str) -> list:
    return [f"{name}:{p.line}:{p.column} {p.level} {p.message}"
            for p in yl_linter.run(text, YAMLLINT)]


class ChartSources(unittest.TestCase):
    def test_helm_engine_is_the_pinned_one(self):
        self.assertEqual(helm.__version__, "0.2.2")
        self.assertTrue(helm.helm_sdk_version().startswith("v4."), helm.helm_sdk_version())

    def test_helm_lint_strict(self):
        for name in kvtest.VALUE_SETS:
            with self.subTest(values=name):
                report = helm.lint(str(kvtest.chart_dir()), kvtest.load_values(name),
                                   strict=True, namespace=kvtest.NAMESPACE)
                problems = [m for m in report["messages"] if m["severity"] >= 2]
                self.assertEqual(report["errors"], [], name)
                self.assertEqual(problems, [], name)

    def test_yamllint_sources(self):
        files = [kvtest.chart_dir() / "Chart.yaml", kvtest.chart_dir() / "values.yaml",
                 kvtest.HERE / "yamllint.yaml"] + sorted(kvtest.VALUES_DIR.glob("*.yaml"))
        problems = []
        for f in files:
            problems += lint_yaml(pathlib.Path(f).read_text(), f.name)
        self.assertEqual(problems, [])


def _add_value_set_tests(name: str) -> None:
    def test_renders_every_role(self):
        objs = kvtest.objects(kvtest.render_set(name))
        roles = {d["metadata"]["labels"]["app.kubernetes.io/component"]
                 for d in kvtest.find(objs, "Deployment")}
        expected = set(kvtest.ROLES)
        if not kvtest.chart().merge_values(kvtest.load_values(name))["relay"]["enabled"]:
            expected.discard("relay")
        self.assertEqual(roles, expected)

    def test_yamllint(self):
        problems = []
        for path, doc in kvtest.manifests(kvtest.render_set(name)):
            problems += lint_yaml(f"---\n# Source: {path}\n{doc}", path)
        self.assertEqual(problems, [])

    def test_kubernetes_schemas(self):
        checked = 0
        for path, doc in kvtest.manifests(kvtest.render_set(name)):
            obj = yaml.safe_load(doc)
            what = f"{path}: {obj['kind']} {obj['metadata']['name']}"
            crd = (obj["apiVersion"], obj["kind"])
            if crd in CRD_KINDS:
                if CRD_KINDS[crd] is not None:
                    schema = json.loads((kvtest.HERE / "schemas" / CRD_KINDS[crd]).read_text())
                    errors = [f"{'.'.join(map(str, e.path))}: {e.message}"
                              for e in jsonschema.Draft202012Validator(schema).iter_errors(obj)]
                    self.assertEqual(errors, [], what)
                    checked += 1
                continue
            for version in KUBE_VERSIONS:
                try:
                    kubernetes_validate.validate(obj, version, strict=True)
                except kubernetes_validate.ValidationError as e:
                    self.fail(f"{what} is invalid for Kubernetes {version}: "
                              f"{'.'.join(map(str, e.path))}: {e.message}")
                except kubernetes_validate.SchemaNotFoundError as e:
                    self.fail(f"{what}: {e.message}")
                checked += 1
        self.assertGreater(checked, 0)

    slug = name.replace("-", "_")
    for fn in (test_renders_every_role, test_yamllint, test_kubernetes_schemas):
        setattr(RenderedValueSets, f"{fn.__name__}__{slug}", fn)


class RenderedValueSets(unittest.TestCase):
    """test_<check>__<value set>, one per value set in values/."""


for _name in kvtest.VALUE_SETS:
    _add_value_set_tests(_name)


if __name__ == "__main__":
    kvtest.main(__name__)
