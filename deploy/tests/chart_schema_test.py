"""values.schema.json refuses nonsense values with a message that names the
value, and the chart's own checks (templates/_validate.tpl) refuse what the
schema cannot express. Each bad value is tried twice: through Helm's render
(what `helm install` does) and, as a second opinion, through Python's
jsonschema (draft 7) on the values Helm merged. Every value set in values/
passes both.

Run by run_in_venv.sh with the venv from setup_deploy_venv.sh.
"""
import json
import unittest

import helm_python as helm
import jsonschema

import kvtest

# name: (values, text the message must contain)
SCHEMA_REJECTS = {
    "negative_replicas": ({"prefill": {"replicas": -1}},
                          "at '/prefill/replicas': minimum: got -1, want 0"),
    "unknown_role": ({"router": {"replicas": 1}}, "additional properties 'router' not allowed"),
    "misspelt_role_key": ({"decode": {"replica": 2}}, "additional properties 'replica' not allowed"),
    "replicas_not_a_number": ({"decode": {"replicas": "eight"}}, "at '/decode/replicas'"),
    "unknown_backend": ({"decode": {"backend": "tpu"}},
                        "at '/decode/backend': value must be one of 'cuda', 'cpu'"),
    "zero_gpus": ({"prefill": {"gpus": 0}}, "at '/prefill/gpus': minimum: got 0, want 1"),
    "port_out_of_range": ({"relay": {"ports": {"moqt": 70000}}},
                          "at '/relay/ports/moqt': maximum: got 70,000, want 65,535"),
    "unknown_model_source": ({"model": {"source": "nfs"}}, "at '/model/source'"),
    "model_image_without_repository": ({"model": {"source": "image"}}, "at '/model/image/repository'"),
    "pvc_without_claim": ({"model": {"pvc": {"claimName": ""}}}, "at '/model/pvc/claimName'"),
    "grpc_tls_without_secret": ({"tls": {"grpc": {"enabled": True}}}, "at '/tls/grpc/secretName'"),
    "https_without_secret": ({"tls": {"http": {"enabled": True}}}, "at '/tls/http/secretName'"),
    "bad_pdb": ({"relay": {"pdb": {"maxUnavailable": "half"}}}, "at '/relay/pdb/maxUnavailable'"),
    "unknown_hpa_metric": ({"scheduler": {"autoscaling": {"metric": "memory"}}},
                           "at '/scheduler/autoscaling/metric'"),
    "unknown_autoscaling_engine": ({"decode": {"autoscaling": {"engine": "vpa"}}},
                                   "at '/decode/autoscaling/engine'"),
    "keda_address_not_a_url": (
        {"prefill": {"autoscaling": {"keda": {"prometheusAddress": "prometheus:9090"}}}},
        "at '/prefill/autoscaling/keda/prometheusAddress'"),
    "host_network_not_boolean": ({"hostNetwork": "yes"}, "at '/hostNetwork'"),
    "service_type": ({"scheduler": {"service": {"type": "Ingress"}}}, "at '/scheduler/service/type'"),
    "extra_arg_not_a_flag": ({"prefill": {"extraArgs": ["rm -rf /"]}}, "at '/prefill/extraArgs/0'"),
}
# Refused by the templates (values.schema.json cannot compare two values).
TEMPLATE_REJECTS = {
    "planner_metric_on_the_relay": (
        {"relay": {"autoscaling": {"enabled": True, "metric": "planner"}}},
        "relay.autoscaling.metric planner: the planner sizes prefill and decode only"),
    "keda_without_the_planner": (
        {"decode": {"autoscaling": {"enabled": True, "engine": "keda", "metric": "custom"}}},
        "decode.autoscaling.engine keda scales on the planner's metric"),
    "hpa_min_above_max": (
        {"decode": {"autoscaling": {"enabled": True, "minReplicas": 9, "maxReplicas": 3}}},
        "decode.autoscaling.minReplicas (9) is greater than maxReplicas (3)"),
    "host_network_port_clash": (
        {"hostNetwork": True, "relay": {"ports": {"metrics": 9090}}},
        "hostNetwork is on, and relay.ports.metrics and scheduler.ports.metrics are both 9090"),
    "public_grpc_tls_without_internal_tls": (
        {"tls": {"grpc": {"enabled": True, "secretName": "g"}, "internal": {"enabled": False}}},
        "tls.grpc.enabled needs tls.internal.enabled"),
    "port_clash_in_one_pod": (
        {"prefill": {"ports": {"moqt": 50061}}},
        "prefill.ports.moqt and prefill.ports.grpc are both 50061"),
}


class SchemaRejects(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        schema = json.loads((kvtest.chart_dir() / "values.schema.json").read_text())
        jsonschema.Draft7Validator.check_schema(schema)
        cls.validator = jsonschema.Draft7Validator(schema)

    def python_errors(self, values):
        return list(self.validator.iter_errors(kvtest.chart().merge_values(values)))

    def test_value_sets_are_accepted(self):
        for name in kvtest.VALUE_SETS:
            values = kvtest.load_values(name)
            kvtest.chart().validate_schema(values)
            self.assertEqual(self.python_errors(values), [], name)


def _add_schema_case(name, values, message):
    def test(self):
        with self.assertRaises(helm.HelmValuesError) as ctx:
            kvtest.render(values)
        self.assertIn(message, str(ctx.exception))
        self.assertNotEqual(self.python_errors(values), [], "jsonschema accepted what Helm refused")
    setattr(SchemaRejects, f"test_rejects_{name}", test)


def _add_template_case(name, values, message):
    def test(self):
        kvtest.chart().validate_schema(values)  # the schema lets it through...
        with self.assertRaises(helm.HelmRenderError) as ctx:  # ...the templates do not
            kvtest.render(values)
        self.assertIn(message, str(ctx.exception))
    setattr(SchemaRejects, f"test_rejects_{name}", test)


for _n, (_v, _m) in SCHEMA_REJECTS.items():
    _add_schema_case(_n, _v, _m)
for _n, (_v, _m) in TEMPLATE_REJECTS.items():
    _add_template_case(_n, _v, _m)


if __name__ == "__main__":
    kvtest.main(__name__)
