"""Values map onto the rendered objects as docs/deploy.md says: replicas per
role, GPU requests, UDP ports, probes, TLS Secret mounts, worker
registration with the scheduler Service, model mounts, HPAs, PDBs, metrics.
Command lines use only flags that the binaries define: the ABSL_FLAGs of
their sources (BINARY_SOURCES), read from this test's runfiles. (The
rehearsal test, chart_rehearsal_test, runs the binaries on what the chart
renders.)

Run by run_in_venv.sh with the venv from setup_deploy_venv.sh.
"""
import base64
import os
import pathlib
import re
import subprocess
import tempfile
import unittest

import kvtest
from kvtest import container, find, flags, render_set, the

# role -> the sources whose ABSL_FLAGs make up its binary's command line
# (each is in this test's data in deploy/tests/BUILD).
BINARY_SOURCES = {
    "scheduler": ["services/scheduler/scheduler_main.cc"],
    "prefill": ["services/worker/worker_flags.cc", "services/prefill/prefill_main.cc"],
    "decode": ["services/worker/worker_flags.cc", "services/decode/decode_main.cc"],
    "relay": ["services/relay/relay_main.cc"],
}
_ABSL_FLAG = re.compile(r"ABSL_FLAG\(\s*[\w:<>, ]+?\s*,\s*(\w+)\s*,")


def defined_flags(role: str) -> set:
    """The flags a role's binary defines, from its sources."""
    out = set()
    for path in BINARY_SOURCES[role]:
        out |= set(_ABSL_FLAG.findall(kvtest.runfile(path).read_text()))
    return out


WORKERS = ("prefill", "decode")
QUIC_ROLES = ("prefill", "decode", "relay")


# Parsed objects of a value set (cached: tests only read them).
objs = kvtest.objects_set


def pod(deployment):
    return deployment["spec"]["template"]["spec"]


def probe_checks(c):
    return {k: {m: v for m, v in c[k].items() if m in ("grpc", "tcpSocket")}
            for k in ("startupProbe", "livenessProbe", "readinessProbe")}


class Replicas(unittest.TestCase):
    def test_defaults_one_pod_per_role(self):
        for role in kvtest.ROLES:
            self.assertEqual(the(objs("defaults"), "Deployment", role)["spec"]["replicas"], 1, role)

    def test_4_prefill_8_decode(self):
        o = objs("scale-4p8d")
        want = {"scheduler": 1, "prefill": 4, "decode": 8, "relay": 1}
        got = {r: the(o, "Deployment", r)["spec"]["replicas"] for r in kvtest.ROLES}
        self.assertEqual(got, want)

    def test_scheduler_replicas(self):
        o = kvtest.objects(kvtest.render({"scheduler": {"replicas": 3}}))
        self.assertEqual(the(o, "Deployment", "scheduler")["spec"]["replicas"], 3)
        # A drain keeps all but one up; the workers find every replica.
        self.assertEqual(the(o, "PodDisruptionBudget", "scheduler")["spec"]["maxUnavailable"], 1)
        peers = the(o, "Service", "scheduler-peers")
        for role in WORKERS:
            self.assertTrue(flags(the(o, "Deployment", role))["scheduler"].startswith(
                peers["metadata"]["name"] + "."), role)

    def test_hpa_owns_replicas(self):
        o = objs("full")
        for role in kvtest.ROLES:
            self.assertNotIn("replicas", the(o, "Deployment", role)["spec"], role)
            hpa = the(o, "HorizontalPodAutoscaler", role)
            self.assertEqual(hpa["spec"]["scaleTargetRef"]["name"],
                             the(o, "Deployment", role)["metadata"]["name"])
        self.assertEqual(find(objs("defaults"), "HorizontalPodAutoscaler"), [])

    def test_hpa_metrics(self):
        o = objs("full")
        metric = {r: the(o, "HorizontalPodAutoscaler", r)["spec"]["metrics"][0] for r in kvtest.ROLES}
        self.assertEqual(metric["scheduler"]["resource"]["target"]["averageUtilization"], 70)
        self.assertEqual(metric["decode"]["resource"]["target"]["averageUtilization"], 60)
        self.assertEqual(metric["prefill"]["type"], "Pods")
        self.assertEqual(metric["prefill"]["pods"]["metric"]["name"], "kvcast_queue_depth")
        self.assertEqual(metric["relay"]["pods"]["target"]["averageValue"], "200")
        prefill = the(o, "HorizontalPodAutoscaler", "prefill")["spec"]
        self.assertEqual((prefill["minReplicas"], prefill["maxReplicas"]), (2, 6))

    def test_planner_metric_asks_for_the_planners_replicas(self):
        o = objs("planner")
        for role, bounds in (("prefill", (1, 12)), ("decode", (2, 20))):
            spec = the(o, "HorizontalPodAutoscaler", role)["spec"]
            self.assertEqual((spec["minReplicas"], spec["maxReplicas"]), bounds)
            [metric] = spec["metrics"]
            self.assertEqual(metric["type"], "External")
            self.assertEqual(metric["external"]["metric"],
                             {"name": "kvcast_planner_desired_replicas",
                              "selector": {"matchLabels": {"role": role}}})
            # A target average of 1: desired replicas = the metric's value.
            self.assertEqual(metric["external"]["target"], {"type": "AverageValue", "averageValue": "1"})
            self.assertNotIn("replicas", the(o, "Deployment", role)["spec"], role)
        for role in ("scheduler", "relay"):
            self.assertEqual(find(o, "HorizontalPodAutoscaler", role), [], role)

    def test_keda_asks_prometheus_for_the_planners_replicas(self):
        o = objs("planner-keda")
        for role, bounds in (("prefill", (1, 12)), ("decode", (2, 20))):
            spec = the(o, "ScaledObject", role)["spec"]
            self.assertEqual(spec["scaleTargetRef"]["name"],
                             the(o, "Deployment", role)["metadata"]["name"])
            self.assertEqual((spec["minReplicaCount"], spec["maxReplicaCount"]), bounds)
            self.assertEqual((spec["pollingInterval"], spec["cooldownPeriod"]), (15, 120))
            [trigger] = spec["triggers"]
            self.assertEqual(trigger["type"], "prometheus")
            self.assertEqual(trigger["metricType"], "AverageValue")
            self.assertEqual(trigger["metadata"], {
                "serverAddress": "http://prometheus.monitoring:9090",
                "query": f'max(kvcast_planner_desired_replicas{{role="{role}"}})',
                "threshold": "1"})
            # KEDA makes the HPA: the chart renders none, nor a replica count.
            self.assertEqual(find(o, "HorizontalPodAutoscaler", role), [], role)
            self.assertNotIn("replicas", the(o, "Deployment", role)["spec"], role)
        self.assertEqual(find(objs("planner"), "ScaledObject"), [])


class Gpus(unittest.TestCase):
    def gpu(self, deployment):
        res = container(deployment)["resources"]
        return (res.get("requests", {}).get("nvidia.com/gpu"),
                res.get("limits", {}).get("nvidia.com/gpu"))

    def test_workers_request_a_gpu_by_default(self):
        o = objs("defaults")
        for role in WORKERS:
            d = the(o, "Deployment", role)
            self.assertEqual(self.gpu(d), (1, 1), role)
            self.assertEqual(flags(d)["backend"], "cuda")
        for role in ("scheduler", "relay"):
            self.assertEqual(self.gpu(the(o, "Deployment", role)), (None, None), role)

    def test_gpus_per_pod(self):
        self.assertEqual(self.gpu(the(objs("full"), "Deployment", "prefill")), (2, 2))

    def test_cpu_backend_requests_no_gpu_and_hides_them(self):
        o = objs("cpu-backend")
        for role in WORKERS:
            d = the(o, "Deployment", role)
            self.assertEqual(self.gpu(d), (None, None), role)
            self.assertEqual(flags(d)["backend"], "cpu")
            env = {e["name"]: e.get("value") for e in container(d)["env"]}
            self.assertEqual(env["NVIDIA_VISIBLE_DEVICES"], "void")


class Ports(unittest.TestCase):
    def test_quic_is_udp_everywhere(self):
        for name in kvtest.VALUE_SETS:
            o = objs(name)
            for role in QUIC_ROLES:
                if not find(o, "Deployment", role):
                    continue
                d, svc = the(o, "Deployment", role), the(o, "Service", role)
                cport = {p["name"]: p for p in container(d)["ports"]}["moqt"]
                sport = {p["name"]: p for p in svc["spec"]["ports"]}["moqt"]
                self.assertEqual((cport["protocol"], sport["protocol"]), ("UDP", "UDP"))
                self.assertEqual(sport["port"], cport["containerPort"])
                listen = flags(d)["listen" if role == "relay" else "moqt_listen"]
                self.assertEqual(listen, f"0.0.0.0:{cport['containerPort']}", (name, role))

    def test_grpc_is_tcp_and_scheduler_has_no_udp(self):
        o = objs("defaults")
        for role in kvtest.ROLES:
            ports = {p["name"]: p for p in the(o, "Service", role)["spec"]["ports"]}
            self.assertEqual(ports["grpc"]["protocol"], "TCP")
            self.assertEqual(flags(the(o, "Deployment", role))["grpc_listen"],
                             f"0.0.0.0:{ports['grpc']['port']}")
        self.assertNotIn("UDP", [p["protocol"] for p in the(o, "Service", "scheduler")["spec"]["ports"]])

    def test_service_types(self):
        o = objs("defaults")
        for role in WORKERS:
            self.assertEqual(the(o, "Service", role)["spec"]["clusterIP"], "None")
        self.assertEqual(the(o, "Service", "scheduler")["spec"]["type"], "ClusterIP")
        self.assertEqual(the(objs("full"), "Service", "scheduler")["spec"]["type"], "LoadBalancer")

    def test_host_network(self):
        o = objs("hostnetwork")
        for role in kvtest.ROLES:
            spec = pod(the(o, "Deployment", role))
            self.assertTrue(spec["hostNetwork"])
            self.assertEqual(spec["dnsPolicy"], "ClusterFirstWithHostNet")
            anti = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            self.assertEqual(anti[-1]["labelSelector"]["matchLabels"]["app.kubernetes.io/component"], role)
        # The role's own affinity survives next to the added anti-affinity.
        self.assertIn("nodeAffinity", pod(the(o, "Deployment", "decode"))["affinity"])
        for role in WORKERS:
            env = {e["name"]: e for e in container(the(o, "Deployment", role))["env"]}
            self.assertEqual(env["KVCAST_ADVERTISE_HOST"]["valueFrom"]["fieldRef"]["fieldPath"],
                             "status.hostIP")
        self.assertNotIn("hostNetwork", pod(the(objs("defaults"), "Deployment", "prefill")))


class Probes(unittest.TestCase):
    def test_grpc_health_probes_on_the_grpc_port(self):
        o = objs("defaults")
        for role in kvtest.ROLES:
            c = container(the(o, "Deployment", role))
            port = {p["name"]: p["containerPort"] for p in c["ports"]}["grpc"]
            # Workers' gRPC is mutual TLS by default (tls.internal): TCP checks.
            want = {"tcpSocket": {"port": "grpc"}} if role in WORKERS else {"grpc": {"port": port}}
            for kind, check in probe_checks(c).items():
                self.assertEqual(check, want, (role, kind))

    def test_tls_probes_fall_back_to_tcp(self):
        o = objs("tls")
        for role in ("scheduler", "prefill", "decode"):
            for kind, check in probe_checks(container(the(o, "Deployment", role))).items():
                self.assertEqual(check, {"tcpSocket": {"port": "grpc"}}, (role, kind))
        # The relay's health port stays plaintext: still a gRPC probe.
        for kind, check in probe_checks(container(the(o, "Deployment", "relay"))).items():
            self.assertEqual(check, {"grpc": {"port": 50081}}, kind)

    def test_workers_get_time_to_load_the_model(self):
        c = container(the(objs("defaults"), "Deployment", "decode"))
        p = c["startupProbe"]
        self.assertGreaterEqual(p["periodSeconds"] * p["failureThreshold"], 300)


class TlsSecrets(unittest.TestCase):
    def mounts(self, d):
        spec = pod(d)
        vols = {v["name"]: v for v in spec["volumes"]}
        return {m["mountPath"]: (vols[m["name"]].get("secret", {}).get("secretName"), m.get("readOnly"))
                for m in container(d)["volumeMounts"]}

    def test_dev_quic_secret_by_default(self):
        o = objs("defaults")
        secret = the_secret(o, "kv-kvcast-quic-dev")
        self.assertEqual(set(secret["data"]), {"tls.crt", "tls.key", "ca.crt"})
        for role in kvtest.ROLES:
            m, f = self.mounts(the(o, "Deployment", role)), flags(the(o, "Deployment", role))
            if role in QUIC_ROLES:
                self.assertEqual(m["/etc/kvcast/quic"], ("kv-kvcast-quic-dev", True), role)
            else:
                self.assertNotIn("/etc/kvcast/quic", m)
            self.assertNotIn("/etc/kvcast/grpc", m)
            # The same material is the scheduler-worker mutual TLS.
            if role == "relay":
                self.assertNotIn("/etc/kvcast/internal", m)
            else:
                self.assertEqual(m["/etc/kvcast/internal"], ("kv-kvcast-quic-dev", True), role)
            if role in WORKERS:
                self.assertEqual((f["grpc_cert"], f["grpc_key"], f["grpc_ca"]),
                                 tuple(f"/etc/kvcast/internal/{k}"
                                       for k in ("tls.crt", "tls.key", "ca.crt")))
            else:
                self.assertNotIn("grpc_cert", f)
            self.assertNotIn("http_cert", f)  # the HTTP API is plaintext by default
            self.assertNotIn("/etc/kvcast/http", m)

    def test_scheduler_and_workers_use_mutual_tls_by_default(self):
        o = objs("defaults")
        sched = the(o, "Deployment", "scheduler")
        f = flags(sched)
        ports = {p["name"]: p for p in the(o, "Service", "scheduler")["spec"]["ports"]}
        self.assertEqual(ports["internal"]["port"], 50052)
        self.assertEqual({p["name"]: p["containerPort"] for p in container(sched)["ports"]}["internal"],
                         50052)
        self.assertEqual(f["internal_grpc_listen"], "0.0.0.0:50052")
        self.assertEqual((f["internal_grpc_cert"], f["internal_grpc_key"], f["internal_grpc_ca"]),
                         tuple(f"/etc/kvcast/internal/{k}" for k in ("tls.crt", "tls.key", "ca.crt")))
        self.assertEqual(f["worker_tls_name"], "kvcast-worker")
        # The development certificate names the scheduler Service (workers
        # verify it) and the worker name (the scheduler verifies workers).
        data = the_secret(o, "kv-kvcast-quic-dev")["data"]
        with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as tmp:
            pathlib.Path(tmp, "tls.crt").write_bytes(base64.b64decode(data["tls.crt"]))
            text = subprocess.run(["openssl", "x509", "-in", "tls.crt", "-noout", "-text"], cwd=tmp,
                                  capture_output=True, text=True, check=True).stdout
        self.assertIn("DNS:kv-kvcast-scheduler.llm.svc", text)
        self.assertIn("DNS:kv-kvcast-scheduler-peers.llm.svc", text)
        self.assertIn("DNS:kvcast-worker", text)
        # Off: workers register on the public port, in plaintext.
        off = kvtest.objects(kvtest.render({"tls": {"internal": {"enabled": False}}}))
        self.assertNotIn("internal_grpc_listen", flags(the(off, "Deployment", "scheduler")))
        for role in WORKERS:
            self.assertNotIn("grpc_cert", flags(the(off, "Deployment", role)))
            self.assertEqual(flags(the(off, "Deployment", role))["scheduler"],
                             "kv-kvcast-scheduler-peers.llm.svc:50051")

    def test_moqt_authorization_key_everywhere_by_default(self):
        for values, secret_name in (("defaults", "kv-kvcast-moqt-auth"),
                                    ("tls", "kvcast-moqt-auth")):
            o = objs(values)
            if values == "defaults":
                key = base64.b64decode(the_secret(o, secret_name)["data"]["moqt-auth.key"])
                self.assertGreaterEqual(len(key.strip()), 32)
                again = kvtest.objects(kvtest.render(kvtest.load_values("defaults")))
                self.assertNotEqual(key, base64.b64decode(
                    the_secret(again, secret_name)["data"]["moqt-auth.key"]),
                    "a fresh install gets a fresh random key")
            for role in kvtest.ROLES:
                d = the(o, "Deployment", role)
                self.assertEqual(self.mounts(d)["/etc/kvcast/moqt-auth"], (secret_name, True), role)
                flag = "auth_key_file" if role == "relay" else "moqt_auth_key_file"
                self.assertEqual(flags(d)[flag], "/etc/kvcast/moqt-auth/moqt-auth.key", role)

    def test_dev_certificate_is_signed_by_its_ca(self):
        data = the_secret(objs("defaults"), "kv-kvcast-quic-dev")["data"]
        with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as tmp:
            for key in data:
                pathlib.Path(tmp, key).write_bytes(base64.b64decode(data[key]))
            ok = subprocess.run(["openssl", "verify", "-CAfile", "ca.crt", "tls.crt"], cwd=tmp,
                                capture_output=True, text=True)
            self.assertEqual(ok.returncode, 0, ok.stdout + ok.stderr)
            text = subprocess.run(["openssl", "x509", "-in", "tls.crt", "-noout", "-text"], cwd=tmp,
                                  capture_output=True, text=True, check=True).stdout
            self.assertIn("DNS:kv-kvcast-relay.llm.svc", text)
            self.assertIn("TLS Web Client Authentication", text)

    def test_tls_on_mounts_both_secrets(self):
        o = objs("tls")
        self.assertEqual(find(o, "Secret"), [])
        for role in kvtest.ROLES:
            d = the(o, "Deployment", role)
            m, f = self.mounts(d), flags(d)
            if role in QUIC_ROLES:
                self.assertEqual(m["/etc/kvcast/quic"], ("kvcast-quic-tls", True), role)
            if role == "relay":  # kvcast-relay has no gRPC TLS flags
                self.assertNotIn("/etc/kvcast/grpc", m)
                self.assertNotIn("grpc_cert", f)
                continue
            # Scheduler-worker TLS: the QUIC Secret (tls.internal.secretName empty).
            self.assertEqual(m["/etc/kvcast/internal"], ("kvcast-quic-tls", True), role)
            # The public gRPC Secret: the scheduler's port only.
            tls_dir = "/etc/kvcast/grpc" if role == "scheduler" else "/etc/kvcast/internal"
            if role == "scheduler":
                self.assertEqual(m["/etc/kvcast/grpc"], ("kvcast-grpc-tls", True), role)
                # HTTPS on the OpenAI-compatible API (tls.http).
                self.assertEqual(m["/etc/kvcast/http"], ("kvcast-http-tls", True), role)
                self.assertEqual((f["http_cert"], f["http_key"]),
                                 ("/etc/kvcast/http/tls.crt", "/etc/kvcast/http/tls.key"))
                mode = [v for v in pod(d)["volumes"] if v["name"] == "grpc-tls"][0]["secret"]["defaultMode"]
                self.assertEqual(mode, 0o440)
            else:
                self.assertNotIn("/etc/kvcast/grpc", m)
            self.assertEqual((f["grpc_cert"], f["grpc_key"], f["grpc_ca"]),
                             tuple(f"{tls_dir}/{k}" for k in ("tls.crt", "tls.key", "ca.crt")))
        relay = flags(the(o, "Deployment", "relay"))
        self.assertEqual((relay["cert"], relay["key"], relay["client_ca"], relay["require_client_cert"]),
                         ("/etc/kvcast/quic/tls.crt", "/etc/kvcast/quic/tls.key",
                          "/etc/kvcast/quic/ca.crt", "true"))
        for role in WORKERS:
            f = flags(the(o, "Deployment", role))
            self.assertEqual(f["quic_cert"], "/etc/kvcast/quic/tls.crt")
            self.assertEqual(f["quic_ca"], "/etc/kvcast/quic/ca.crt")


def the_secret(o, name):
    found = [s for s in find(o, "Secret") if s["metadata"]["name"] == name]
    assert len(found) == 1, f"no Secret {name}"
    return found[0]


class Wiring(unittest.TestCase):
    def test_workers_register_with_every_scheduler_replica(self):
        for name in kvtest.VALUE_SETS:
            o = objs(name)
            svc = the(o, "Service", "scheduler")
            peers = the(o, "Service", "scheduler-peers")
            # Headless, listing replicas before they are ready (a scheduler is
            # ready once workers registered), selecting the scheduler pods.
            self.assertEqual(peers["spec"]["clusterIP"], "None")
            self.assertTrue(peers["spec"]["publishNotReadyAddresses"])
            self.assertEqual(peers["spec"]["selector"], svc["spec"]["selector"])
            # The internal (mutual TLS) port: on in every value set.
            internal = {p["name"]: p["port"] for p in svc["spec"]["ports"]}["internal"]
            (port,) = peers["spec"]["ports"]
            self.assertEqual((port["port"], port["targetPort"]), (internal, "internal"))
            for role in WORKERS:
                self.assertEqual(flags(the(o, "Deployment", role))["scheduler"],
                                 f"{peers['metadata']['name']}.llm.svc:{internal}", (name, role))

    def test_workers_use_the_relay_service_when_there_is_one(self):
        o = objs("defaults")
        svc = the(o, "Service", "relay")
        moqt = {p["name"]: p["port"] for p in svc["spec"]["ports"]}["moqt"]
        for role in WORKERS:
            self.assertEqual(flags(the(o, "Deployment", role))["relay"],
                             f"{svc['metadata']['name']}.llm.svc:{moqt}")
            self.assertNotIn("relay", flags(the(objs("cpu-backend"), "Deployment", role)))

    def test_selectors_match_pods(self):
        o = objs("full")
        for role in kvtest.ROLES:
            labels = the(o, "Deployment", role)["spec"]["template"]["metadata"]["labels"]
            selectors = [the(o, "Service", role)["spec"]["selector"],
                         the(o, "Deployment", role)["spec"]["selector"]["matchLabels"]]
            selectors += [p["spec"]["selector"]["matchLabels"] for p in find(o, "PodDisruptionBudget", role)]
            selectors += [t["labelSelector"]["matchLabels"]
                          for t in pod(the(o, "Deployment", role))["topologySpreadConstraints"]]
            for sel in selectors:
                self.assertTrue(sel.items() <= labels.items(), (role, sel))

    def test_pdbs(self):
        o = objs("full")
        self.assertEqual(the(o, "PodDisruptionBudget", "decode")["spec"]["maxUnavailable"], "25%")
        self.assertEqual(find(o, "PodDisruptionBudget", "relay"), [])
        self.assertEqual(len(find(objs("defaults"), "PodDisruptionBudget")), 4)

    def test_non_root(self):
        for role in kvtest.ROLES:
            d = the(objs("defaults"), "Deployment", role)
            self.assertTrue(pod(d)["securityContext"]["runAsNonRoot"])
            self.assertEqual(pod(d)["securityContext"]["runAsUser"], 10001)
            self.assertTrue(container(d)["securityContext"]["readOnlyRootFilesystem"])


class Model(unittest.TestCase):
    def model(self, name, role="prefill"):
        d = the(objs(name), "Deployment", role)
        vol = [v for v in pod(d)["volumes"] if v["name"] == "model"][0]
        mount = [m for m in container(d)["volumeMounts"] if m["name"] == "model"][0]
        self.assertTrue(mount["readOnly"])
        file = kvtest.load_values(name).get("model", {}).get("file")
        want = mount["mountPath"] + ("/" + file if file else "")
        self.assertEqual(flags(d)["model"], want)
        return d, vol

    def test_pvc(self):
        _, vol = self.model("defaults", "decode")
        self.assertEqual(vol["persistentVolumeClaim"], {"claimName": "kvcast-model", "readOnly": True})

    def test_host_path(self):
        _, vol = self.model("cpu-backend")
        self.assertEqual(vol["hostPath"]["path"], "/srv/models/smollm2")

    def test_copied_out_of_an_image(self):
        d, vol = self.model("full")
        self.assertIn("emptyDir", vol)
        init = pod(d)["initContainers"][0]
        self.assertEqual(init["image"], "models/smollm-135m:2024-07")
        self.assertEqual(init["command"], ["cp", "-R", "/checkpoint/.", "/kvcast-model/"])

    def test_scheduler_mounts_the_model_too(self):
        for name in ("defaults", "cpu-backend"):
            _, vol = self.model(name, "scheduler")
            _, worker_vol = self.model(name, "decode")
            self.assertEqual(vol, worker_vol, name)

    def test_scheduler_copies_only_the_tokenizer_out_of_an_image(self):
        d, vol = self.model("full", "scheduler")
        self.assertEqual(vol["emptyDir"], {"sizeLimit": "1Gi"})
        init = pod(d)["initContainers"][0]
        self.assertEqual(init["image"], "models/smollm-135m:2024-07")
        # The path is the shell's $0, never part of the script.
        self.assertEqual(init["command"], ["sh", "-c", 'cp "$0"/tokenizer* /kvcast-model/', "/checkpoint"])

    def test_relay_mounts_no_model(self):
        d = the(objs("defaults"), "Deployment", "relay")
        self.assertNotIn("model", [v["name"] for v in pod(d)["volumes"]])


class DiskTier(unittest.TestCase):
    def test_off_by_default(self):
        d = the(objs("defaults"), "Deployment", "decode")
        self.assertNotIn("kv_disk_tier_mb", flags(d))
        self.assertNotIn("kv-tier", [v["name"] for v in pod(d)["volumes"]])

    def test_empty_dir_and_host_path(self):
        for volume, key in (("emptyDir", "emptyDir"), ("hostPath", "hostPath")):
            o = kvtest.objects(kvtest.render({"decode": {
                "kvHostTierMB": 1024, "kvDiskTier": {"mb": 8192, "volume": volume}}}))
            d = the(o, "Deployment", "decode")
            f = flags(d)
            self.assertEqual((f["kv_disk_tier_dir"], f["kv_disk_tier_mb"]),
                             ("/var/lib/kvcast/kv-tier", "8192"))
            (vol,) = [v for v in pod(d)["volumes"] if v["name"] == "kv-tier"]
            self.assertIn(key, vol)
            if key == "emptyDir":
                self.assertEqual(vol["emptyDir"]["sizeLimit"], "8256Mi")
            else:
                self.assertEqual(vol["hostPath"], {"path": "/var/lib/kvcast/kv-tier",
                                                   "type": "DirectoryOrCreate"})
            mounts = {m["name"]: m["mountPath"] for m in container(d)["volumeMounts"]}
            self.assertEqual(mounts["kv-tier"], "/var/lib/kvcast/kv-tier")
            self.assertNotIn("kv_disk_tier_mb", flags(the(o, "Deployment", "prefill")))

    def test_relay_spill(self):
        o = kvtest.objects(kvtest.render({"relay": {"kvDiskTier": {"mb": 2048}}}))
        d = the(o, "Deployment", "relay")
        f = flags(d)
        self.assertEqual((f["spill_dir"], f["spill_mb"]), ("/var/lib/kvcast/kv-tier", "2048"))
        (vol,) = [v for v in pod(d)["volumes"] if v["name"] == "kv-tier"]
        self.assertEqual(vol["emptyDir"]["sizeLimit"], "2112Mi")
        self.assertNotIn("spill_mb", flags(the(objs("defaults"), "Deployment", "relay")))

    def test_needs_the_host_tier(self):
        with self.assertRaisesRegex(Exception, "decode.kvDiskTier.mb needs decode.kvHostTierMB"):
            kvtest.render({"decode": {"kvDiskTier": {"mb": 10}}})


class Metrics(unittest.TestCase):
    def test_scrape_annotations_name_the_metrics_port(self):
        o = objs("defaults")
        for role in kvtest.ROLES:
            d = the(o, "Deployment", role)
            ann = d["spec"]["template"]["metadata"]["annotations"]
            port = {p["name"]: p["containerPort"] for p in container(d)["ports"]}["metrics"]
            self.assertEqual((ann["prometheus.io/scrape"], ann["prometheus.io/port"]), ("true", str(port)))
            self.assertEqual(flags(d)["metrics_listen"], f"0.0.0.0:{port}")

    def test_service_monitor(self):
        o = objs("full")
        (sm,) = find(o, "ServiceMonitor")
        self.assertEqual(sm["apiVersion"], "monitoring.coreos.com/v1")
        self.assertEqual(sm["metadata"]["labels"]["release"], "prometheus")
        self.assertEqual(sm["spec"]["endpoints"][0]["port"], "metrics")
        self.assertEqual(sm["spec"]["selector"]["matchExpressions"],
                         [{"key": "app.kubernetes.io/component", "operator": "NotIn",
                           "values": ["scheduler-peers"]}])
        for svc in find(o, "Service"):
            self.assertTrue(sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items())
            if svc["metadata"]["labels"]["app.kubernetes.io/component"] != "scheduler-peers":
                self.assertIn("metrics", [p["name"] for p in svc["spec"]["ports"]])
        self.assertEqual(find(objs("defaults"), "ServiceMonitor"), [])


class HttpApi(unittest.TestCase):
    def test_openai_api_port_flag_and_service(self):
        o = objs("defaults")
        d = the(o, "Deployment", "scheduler")
        ports = {p["name"]: p["containerPort"] for p in container(d)["ports"]}
        self.assertEqual(ports["http"], 8000)
        self.assertEqual(flags(d)["http_listen"], "0.0.0.0:8000")
        self.assertNotIn("api_keys_file", flags(d))
        svc = the(o, "Service", "scheduler")
        self.assertIn({"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP",
                       "appProtocol": "http"}, svc["spec"]["ports"])
        notes = render_set("defaults")["kvcast/templates/NOTES.txt"]
        self.assertIn("127.0.0.1:8000/v1/chat/completions", notes)

    def test_http_off_and_api_keys_secret(self):
        values = kvtest.load_values("defaults")
        values.setdefault("scheduler", {})["ports"] = {"grpc": 50051, "metrics": 9090, "http": 0}
        values["scheduler"]["apiKeysSecret"] = "llm-api-keys"
        o = list(kvtest.objects(kvtest.render(values)))
        d = the(o, "Deployment", "scheduler")
        self.assertNotIn("http", [p["name"] for p in container(d)["ports"]])
        self.assertNotIn("http_listen", flags(d))
        self.assertEqual(flags(d)["api_keys_file"], "/etc/kvcast/api-keys/api_keys")
        self.assertIn({"name": "api-keys", "mountPath": "/etc/kvcast/api-keys", "readOnly": True},
                      container(d)["volumeMounts"])
        self.assertIn({"name": "api-keys", "secret": {"secretName": "llm-api-keys", "defaultMode": 0o440}},
                      pod(d)["volumes"])
        self.assertNotIn("http", [p["name"] for p in the(o, "Service", "scheduler")["spec"]["ports"]])


class Notes(unittest.TestCase):
    def test_notes_tell_how_to_call_the_scheduler(self):
        notes = render_set("defaults")["kvcast/templates/NOTES.txt"]
        self.assertIn("kubectl -n llm port-forward svc/kv-kvcast-scheduler 50051:50051", notes)
        self.assertIn("grpcurl -plaintext -d '{\"service\": \"\"}' 127.0.0.1:50051 "
                      "grpc.health.v1.Health/Check", notes)
        self.assertIn("kv-kvcast-prefill: 1 pod(s), 1 nvidia.com/gpu each", notes)
        tls = render_set("tls")["kvcast/templates/NOTES.txt"]
        self.assertIn("-cacert ca.crt -cert tls.crt -key tls.key -servername kv-kvcast-scheduler.llm.svc", tls)
        self.assertIn("kv-kvcast-decode: 8 pod(s)", render_set("scale-4p8d")["kvcast/templates/NOTES.txt"])


class CommandLines(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.defined = {role: defined_flags(role) for role in kvtest.ROLES}

    def test_sources_are_parsed(self):
        self.assertIn("require_client_cert", self.defined["relay"])
        self.assertIn("subscribe_wait_ms", self.defined["relay"])
        self.assertIn("lease_s", self.defined["scheduler"])
        for role in WORKERS:
            self.assertIn("quic_cert", self.defined[role])
            self.assertIn("drain_s", self.defined[role])
        self.assertIn("retain_s", self.defined["prefill"])

    def test_only_flags_the_binaries_define(self):
        # extraArgs included: the value sets' extra flags must exist too.
        for name in kvtest.VALUE_SETS:
            o = objs(name)
            for role in kvtest.ROLES:
                for d in find(o, "Deployment", role):
                    self.assertEqual(set(flags(d)) - self.defined[role], set(), (name, role))

    def test_no_flag_twice(self):
        for name in kvtest.VALUE_SETS:
            for d in find(objs(name), "Deployment"):
                names = [a.removeprefix("--").partition("=")[0] for a in container(d)["args"]]
                self.assertEqual(len(names), len(set(names)), (name, names))

    def test_relay_waits_for_the_publisher(self):
        # Decode subscribes before prefill announces: the relay must wait.
        self.assertEqual(flags(the(objs("defaults"), "Deployment", "relay"))["subscribe_wait_ms"], "10000")

    def test_scheduler_reads_the_tokenizer(self):
        for name in kvtest.VALUE_SETS:
            file = kvtest.load_values(name).get("model", {}).get("file")
        self.assertEqual(flags(the(objs(name), "Deployment", "scheduler"))["model"],
                         "/model" + ("/" + file if file else ""), name)

    def test_model_name(self):
        for role in WORKERS:
            self.assertEqual(flags(the(objs("full"), "Deployment", role))["model_name"], "smollm-135m")
            self.assertNotIn("model_name", flags(the(objs("defaults"), "Deployment", role)))

    def test_drain_ends_before_the_kill(self):
        for name in kvtest.VALUE_SETS:
            for role in ("scheduler", "prefill", "decode"):
                d = the(objs(name), "Deployment", role)
                grace = pod(d)["terminationGracePeriodSeconds"]
                self.assertEqual(float(flags(d)["drain_s"]), max(1, grace - 5), (name, role))
            self.assertNotIn("drain_s", flags(the(objs("defaults"), "Deployment", "relay")))

    def test_binaries(self):
        o = objs("defaults")
        for role in kvtest.ROLES:
            self.assertEqual(container(the(o, "Deployment", role))["command"],
                             [f"/usr/local/bin/kvcast-{role}"])


# Values whose insides are Kubernetes objects, documented as one value.
OPAQUE = {"resources", "podSecurityContext", "containerSecurityContext"}


def leaf_paths(values: dict, prefix: str = ""):
    for key, value in values.items():
        path = prefix + key
        if isinstance(value, dict) and value and key not in OPAQUE:
            yield from leaf_paths(value, path + ".")
        else:
            yield path


class Docs(unittest.TestCase):
    """docs/deploy.md names every value and every flag the chart passes."""

    @classmethod
    def setUpClass(cls):
        cls.text = kvtest.runfile("docs/deploy.md").read_text()

    def test_every_value_is_documented(self):
        missing = []
        for path in leaf_paths(kvtest.chart().values):
            role, _, rel = path.partition(".")
            if f"`{path}`" not in self.text and not (role in kvtest.ROLES and f"`{rel}`" in self.text):
                missing.append(path)
        self.assertEqual(missing, [])

    def test_every_flag_is_documented(self):
        o = objs("full") + objs("tls")
        passed = set()
        for role in kvtest.ROLES:
            for d in find(o, "Deployment", role):
                passed |= set(flags(d)) - {"chunk_tokens"}  # full.yaml's extraArgs example
        self.assertEqual(sorted(f for f in passed if f"--{f}" not in self.text), [])


if __name__ == "__main__":
    kvtest.main(__name__)
