#!/usr/bin/env python3
"""Check deploy/kubernetes and deploy/envoy (run by scripts/check-deploy.sh).

1. Every Kubernetes manifest validates against the JSON schemas of a pinned Kubernetes
   version in strict mode (unknown fields rejected), with the schemas that the PyPI
   package kubernetes-validate ships (no download at run time).
2. The check itself can fail: a copy of the StatefulSet with one misspelt field, and one
   with a wrong type, must both be rejected.
3. The linerate.toml inside the ConfigMap passes `linerate check-config`.
4. The pieces agree: the StatefulSet's governing Service is the headless one, probes hit
   /ready and /health on the admin port, the grace period covers the preStop wait plus
   timeouts.shutdown_grace_ms, the PDB and Services select the pods.
5. Envoy's ring-hash example has the expected structure (`envoy --mode validate` is not
   available on the build machines).
"""
import copy
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import kubernetes_validate
import yaml

K8S_VERSION = "1.33.0"
ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "kubernetes"
MANIFESTS = ["configmap.yaml", "services.yaml", "pdb.yaml", "statefulset.yaml"]


def fail(msg):
    print(f"check-deploy: {msg}", file=sys.stderr)
    sys.exit(1)


def validate(doc):
    """None when `doc` is valid, else the validator's message."""
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        return str(e.message)
    except kubernetes_validate.SchemaNotFoundError as e:
        return f"no schema: {e}"
    return None


def main():
    linerate = sys.argv[1]
    docs = {}
    for name in MANIFESTS:
        for doc in yaml.safe_load_all((K8S / name).read_text()):
            err = validate(doc)
            if err:
                fail(f"{name}: {doc['kind']}/{doc['metadata']['name']}: {err}")
            docs[(doc["kind"], doc["metadata"]["name"])] = doc
            print(f"ok  {name}: {doc['kind']}/{doc['metadata']['name']} (Kubernetes {K8S_VERSION}, strict)")
    kustom = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    if sorted(kustom["resources"]) != sorted(MANIFESTS):
        fail(f"kustomization.yaml lists {kustom['resources']}, expected {MANIFESTS}")

    sts = docs[("StatefulSet", "linerate")]
    typo = copy.deepcopy(sts)
    pod = typo["spec"]["template"]["spec"]
    pod["terminationGracePeriodSecond"] = pod.pop("terminationGracePeriodSeconds")
    if validate(typo) is None:
        fail("the schema check accepted a misspelt field (terminationGracePeriodSecond)")
    wrong = copy.deepcopy(sts)
    wrong["spec"]["replicas"] = "three"
    if validate(wrong) is None:
        fail("the schema check accepted a string for spec.replicas")
    print("ok  a misspelt field and a wrong type are rejected")

    toml_text = docs[("ConfigMap", "linerate")]["data"]["linerate.toml"]
    with tempfile.NamedTemporaryFile("w", suffix=".toml") as f:
        f.write(toml_text)
        f.flush()
        r = subprocess.run([linerate, "check-config", f.name], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"configmap.yaml linerate.toml: {r.stderr.strip()}")
    print("ok  configmap.yaml linerate.toml passes linerate check-config")
    config = tomllib.loads(toml_text)

    headless = docs[("Service", "linerate-peers")]
    if headless["spec"].get("clusterIP") != "None" or sts["spec"]["serviceName"] != "linerate-peers":
        fail("the StatefulSet's serviceName must be the headless Service linerate-peers")
    labels = sts["spec"]["template"]["metadata"]["labels"]
    for key in [("Service", "linerate-peers"), ("Service", "linerate")]:
        sel = docs[key]["spec"]["selector"]
        if any(labels.get(k) != v for k, v in sel.items()):
            fail(f"{key[1]} selects {sel}, the pods are {labels}")
    pdb_sel = docs[("PodDisruptionBudget", "linerate")]["spec"]["selector"]["matchLabels"]
    if any(labels.get(k) != v for k, v in pdb_sel.items()):
        fail("the PodDisruptionBudget does not select the pods")
    c = sts["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    admin_port = int(config["admin"]["listen"].rsplit(":", 1)[1])
    http_port = int(config["server"]["listen"][0].rsplit(":", 1)[1])
    if ports != {"http": http_port, "admin": admin_port}:
        fail(f"container ports {ports} differ from the config's listen addresses")
    if c["readinessProbe"]["httpGet"] != {"path": "/ready", "port": "admin"}:
        fail("the readiness probe must be GET /ready on the admin port")
    if c["livenessProbe"]["httpGet"] != {"path": "/health", "port": "admin"}:
        fail("the liveness probe must be GET /health on the admin port")
    pre = " ".join(c["lifecycle"]["preStop"]["exec"]["command"])
    if "linerate drain" not in pre:
        fail("preStop must drain")
    sleeps = [int(n) for n in re.findall(r"\bsleep (\d+)", pre)]
    grace_s = config["timeouts"]["shutdown_grace_ms"] / 1000
    tgps = sts["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    if tgps < sum(sleeps) + 5 or sleeps[-1] < grace_s:
        fail(f"terminationGracePeriodSeconds {tgps} must exceed preStop sleeps {sleeps} (the last one >= shutdown grace {grace_s} s)")
    print("ok  Services, PDB, probes, preStop and grace period agree with the config")

    envoy = yaml.safe_load((ROOT / "deploy" / "envoy" / "ring-hash.yaml").read_text())
    listener = envoy["static_resources"]["listeners"][0]
    hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
    if not hcm["@type"].endswith("http_connection_manager.v3.HttpConnectionManager"):
        fail("envoy: the listener's filter is not the HTTP connection manager")
    route = hcm["route_config"]["virtual_hosts"][0]["routes"][0]["route"]
    cluster = {c["name"]: c for c in envoy["static_resources"]["clusters"]}[route["cluster"]]
    if route["hash_policy"] != [{"header": {"header_name": ":path"}}]:
        fail("envoy: the route must hash on :path")
    if cluster["lb_policy"] != "RING_HASH" or cluster["type"] != "STRICT_DNS":
        fail("envoy: the cluster must be STRICT_DNS with RING_HASH")
    if cluster["health_checks"][0]["http_health_check"]["path"] != "/ready":
        fail("envoy: the health check must be /ready")
    ep = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
    if not ep["address"]["socket_address"]["address"].startswith("linerate-peers."):
        fail("envoy: endpoints must come from the headless Service linerate-peers")
    if ep["address"]["socket_address"]["port_value"] != http_port or ep["health_check_config"]["port_value"] != admin_port:
        fail("envoy: ports differ from the config's listen addresses")
    print("ok  deploy/envoy/ring-hash.yaml: ring hash on :path over the headless Service, /ready health checks (structure only; envoy --mode validate not available)")


if __name__ == "__main__":
    main()
