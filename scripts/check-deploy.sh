#!/usr/bin/env bash
# Validate deploy/kubernetes (schemas of a pinned Kubernetes version, strict) and the
# Envoy example: see scripts/check_deploy.py. Installs what it needs when missing:
# python3-venv from Debian (as root), then kubernetes-validate (which ships the
# Kubernetes JSON schemas) and PyYAML from PyPI into target/deploy-check-venv.
#
#   scripts/check-deploy.sh [path/to/linerate]   # default: builds target/debug/linerate
set -euo pipefail
cd "$(dirname "$0")/.."

# kubernetes-validate 1.37.0 carries schemas for Kubernetes 1.25-1.37; the checker pins
# 1.33.0. To move: bump both, run this script, fix what it reports.
KV_VERSION=1.37.0
venv=target/deploy-check-venv
if ! "$venv/bin/python" -c 'import kubernetes_validate, yaml' 2>/dev/null; then
    if ! python3 -m venv "$venv" >/dev/null 2>&1; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
            DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-venv >/dev/null 2>&1 \
                || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-venv >/dev/null; }
        fi
        rm -rf "$venv"
        python3 -m venv "$venv"
    fi
    "$venv/bin/pip" install -q "kubernetes-validate==$KV_VERSION" PyYAML
fi
linerate="${1:-}"
if [ -z "$linerate" ]; then
    cargo build -q -p linerate
    linerate=target/debug/linerate
fi
"$venv/bin/python" scripts/check_deploy.py "$linerate"
# The simulated deployment: the ConfigMap's linerate.toml on three simulated pods
# (network namespaces, dnsmasq answering as CoreDNS for the headless Service, POD_NAME
# per pod) must form one cache (crates/linerate/tests/deploy.rs; root, iproute2 and
# dnsmasq needed, as for scripts/test.sh).
LINERATE_BIN="$(realpath "$linerate")" cargo test -q -p linerate --test deploy
