#!/usr/bin/env python3
"""Check deploy/kubernetes and deploy/envoy (run by scripts/check-deploy.sh).

1. Every Kubernetes manifest validates against the JSON schemas of a pinned Kubernetes
   version in strict mode (unknown fields rejected), with the schemas that the PyPI
   package kubernetes-validate ships (no download at run time).
2. The check itself can fail: a copy of the StatefulSet with one misspelt field, and one
   with a wrong type, must both be rejected.
3. The linerate.toml inside the ConfigMap passes `linerate check-config` as a pod
   would load it: POD_NAME set, the Secret's keys as the files of its volume (the
   mount point mapped to a temporary directory). crates/linerate/tests/deploy.rs runs
   the same file on simulated pods (network namespaces, a DNS server answering as
   CoreDNS) and checks they form one cache.
4. The pieces agree: the StatefulSet's governing Service is the headless one whose SRV
   records [cluster] peers_dns names, POD_NAME is the pod's name and self_env reads
   it, the token and cluster secret come from the Secret's volume, probes hit /ready
   (tolerating a slow probe) and /live on the admin port, preStop is `linerate drain`
   in exec form (no shell) waiting at most the shutdown grace, the grace period covers
   it, the NetworkPolicy opens the admin port only to selected pods, the PDB and
   Services select the pods, and kustomization.yaml's image names the container's.
5. Envoy's ring-hash example has the expected structure (`envoy --mode validate` is not
   available on the build machines).
"""
import copy
import os
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
MANIFESTS = ["configmap.yaml", "secret.yaml", "services.yaml", "networkpolicy.yaml", "pdb.yaml", "statefulset.yaml"]
# Where statefulset.yaml mounts the Secret (mapped to a temporary directory here).
SECRET_MOUNT = "/etc/linerate-secret"


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
    secret = docs[("Secret", "linerate")]
    with tempfile.TemporaryDirectory() as vol:
        for key, value in secret["stringData"].items():
            Path(vol, key).write_text(value)
        if SECRET_MOUNT + "/" not in toml_text:
            fail(f"configmap.yaml linerate.toml reads nothing from the Secret at {SECRET_MOUNT}")
        with tempfile.NamedTemporaryFile("w", suffix=".toml") as f:
            f.write(toml_text.replace(SECRET_MOUNT + "/", vol + "/"))
            f.flush()
            env = dict(os.environ, POD_NAME="linerate-0")
            r = subprocess.run([linerate, "check-config", f.name], capture_output=True, text=True, env=env)
            if r.returncode != 0:
                fail(f"configmap.yaml linerate.toml: {r.stderr.strip()}")
    print("ok  configmap.yaml linerate.toml passes linerate check-config (POD_NAME=linerate-0, the Secret's keys as files)")
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
    ready, live = c["readinessProbe"], c["livenessProbe"]
    if ready["httpGet"] != {"path": "/ready", "port": "admin"}:
        fail("the readiness probe must be GET /ready on the admin port")
    if ready.get("failureThreshold", 3) < 2 or "timeoutSeconds" not in ready:
        fail("the readiness probe must tolerate one slow probe: failureThreshold > 1 and a timeoutSeconds")
    if live["httpGet"] != {"path": "/live", "port": "admin"}:
        fail("the liveness probe must be GET /live on the admin port (/health and /ready fail on dead disks, which a restart does not fix)")
    pre = c["lifecycle"]["preStop"]["exec"]["command"]
    if pre[0] != c["command"][0] or pre[1] != "drain" or any(w in ("sh", "/bin/sh", "-c") for w in pre):
        fail(f"preStop must be `linerate drain` in exec form, no shell: {pre}")
    flag = lambda name: int(pre[pre.index(name) + 1]) if name in pre else 0
    delay, wait = flag("--delay-s"), flag("--wait-s")
    grace_s = config["timeouts"]["shutdown_grace_ms"] / 1000
    tgps = sts["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    if wait < grace_s or tgps < delay + wait + 5:
        fail(f"preStop must wait (--wait-s {wait}) the shutdown grace {grace_s} s, and terminationGracePeriodSeconds {tgps} exceed --delay-s + --wait-s + 5")
    cluster = config["cluster"]
    env = {e["name"]: e for e in c["env"]}
    if cluster.get("self_env") != "POD_NAME" or env["POD_NAME"]["valueFrom"] != {"fieldRef": {"fieldPath": "metadata.name"}}:
        fail("[cluster] self_env must be POD_NAME, set from the pod's metadata.name")
    srv_port = [p for p in headless["spec"]["ports"] if p["name"] == "http"]
    if cluster.get("peers_dns") != "_http._tcp.linerate-peers" or not srv_port or headless["spec"].get("publishNotReadyAddresses"):
        fail("[cluster] peers_dns must name the SRV records of the headless Service's `http` port (ready pods only)")
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    secret_vol = [n for n, v in vols.items() if v.get("secret", {}).get("secretName") == "linerate"]
    if not secret_vol or mounts.get(secret_vol[0]) != SECRET_MOUNT or vols[secret_vol[0]]["secret"].get("optional"):
        fail(f"the Secret linerate must be mounted (not optional) at {SECRET_MOUNT}")
    for key, path in [("admin.token_file", config["admin"].get("token_file")), ("cluster.secret_file", cluster.get("secret_file"))]:
        if not path or not path.startswith(SECRET_MOUNT + "/") or path.rsplit("/", 1)[1] not in secret["stringData"]:
            fail(f"{key} must be a key of the Secret linerate under {SECRET_MOUNT}")
    if "token" in config["admin"] or "secret" in cluster:
        fail("no token or cluster secret in the ConfigMap: they come from the Secret")
    netpol = docs[("NetworkPolicy", "linerate")]["spec"]
    if any(labels.get(k) != v for k, v in netpol["podSelector"]["matchLabels"].items()):
        fail("the NetworkPolicy does not select the pods")
    for rule in netpol["ingress"]:
        if any(p["port"] in ("admin", admin_port) for p in rule["ports"]) and not rule.get("from"):
            fail("the NetworkPolicy opens the admin port to everyone")
    if not any(any(p["port"] == "admin" for p in r["ports"]) for r in netpol["ingress"]):
        fail("the NetworkPolicy has no rule for the admin port (operators and probes)")
    images = {i["name"]: i for i in kustom.get("images", [])}
    if c["image"] not in images:
        fail(f"kustomization.yaml images: does not name the container's image {c['image']!r}")
    print("ok  Services, Secret, NetworkPolicy, PDB, probes, preStop, grace period and image agree with the config")

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
