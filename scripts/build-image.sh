#!/usr/bin/env bash
# Build linerate's container image with no base image and no registry: the static
# binary (glibc linked in, as scripts/ktls-vm-test.sh builds it) on an empty root
# (`scratch`), run as user 10001, assembled directly as an OCI image layout (tar,
# sha256, JSON: what `docker build` of deploy/Dockerfile makes elsewhere), then checked
# by running the image's own binary from its unpacked layer (chroot, as root, as user
# 10001): `--version`, `check-config` of deploy/kubernetes' ConfigMap as a pod loads
# it, and `serve` in front of an origin named by host name.
#
#   scripts/build-image.sh                 # release build -> target/image (OCI layout)
#   IMAGE_PROFILE=debug scripts/build-image.sh   # faster build, same image shape
#   IMAGE_TAG=0.1.0 scripts/build-image.sh
#
# Outputs: target/image/ (an OCI image layout: oci-layout, index.json, blobs/sha256/)
# and target/image.tar (the same, as one archive). Push or load with the usual tools:
#   skopeo copy oci:target/image:0.1.0 docker://registry.example.com/video/linerate:0.1.0
#   podman load -i target/image.tar        # docker load -i target/image.tar (Docker 25+)
#
# Not in scripts/test.sh: the static build takes minutes (it is a second build of the
# workspace, under target/x86_64-unknown-linux-gnu/).
#
# Why no Debian buildah/podman: both would still want a base image or a registry to
# be useful here, and the layout is a few files; skopeo/podman read it as it is.
# Static glibc: since glibc 2.34 the `files` and `dns` name services are inside libc,
# so host names (an origin such as http://origin) resolve with no NSS modules in the
# image, from the pod's /etc/hosts and /etc/resolv.conf.
set -euo pipefail
cd "$(dirname "$0")/.."

profile="${IMAGE_PROFILE:-release}"
tag="${IMAGE_TAG:-$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)}"
triple=x86_64-unknown-linux-gnu
out=target/image

echo "== static $profile build of linerate ($triple, crt-static)"
RUSTFLAGS="-C target-feature=+crt-static" cargo build --profile "$( [ "$profile" = debug ] && echo dev || echo "$profile")" \
    --target "$triple" -p linerate --bin linerate
bin="target/$triple/$profile/linerate"
if readelf -l "$bin" | grep -q 'Requesting program interpreter'; then
    echo "build-image: $bin is dynamically linked" >&2
    exit 1
fi

echo "== OCI image layout in $out (tag $tag)"
rm -rf "$out" "$out.tar"
python3 - "$bin" "$out" "$tag" <<'PY'
import gzip, hashlib, io, json, os, sys, tarfile, time

binary, out, tag = sys.argv[1], sys.argv[2], sys.argv[3]
# Reproducible: every time stamp is the commit's (or 0).
epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
UID = GID = 10001


def entry(name, kind, mode, uid=0, gid=0, data=b""):
    t = tarfile.TarInfo(name)
    t.type, t.mode, t.uid, t.gid, t.mtime = kind, mode, uid, gid, epoch
    t.uname = t.gname = ""
    t.size = len(data) if kind == tarfile.REGTYPE else 0
    return t, data


files = [
    entry("etc", tarfile.DIRTYPE, 0o755),
    entry("etc/group", tarfile.REGTYPE, 0o644, data=b"root:x:0:\nlinerate:x:10001:\n"),
    # No shell in the image: nobody logs in.
    entry("etc/passwd", tarfile.REGTYPE, 0o644,
          data=b"root:x:0:0:root:/:/nonexistent\nlinerate:x:10001:10001:linerate:/nonexistent:/nonexistent\n"),
    entry("etc/linerate", tarfile.DIRTYPE, 0o755),
    entry("tmp", tarfile.DIRTYPE, 0o1777),
    entry("usr", tarfile.DIRTYPE, 0o755),
    entry("usr/bin", tarfile.DIRTYPE, 0o755),
    entry("usr/bin/linerate", tarfile.REGTYPE, 0o755, data=open(binary, "rb").read()),
    entry("var", tarfile.DIRTYPE, 0o755),
    entry("var/cache", tarfile.DIRTYPE, 0o755),
    # The cache volume's mount point; the volume itself is the pod's (fsGroup 10001).
    entry("var/cache/linerate", tarfile.DIRTYPE, 0o750, UID, GID),
]
raw = io.BytesIO()
with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
    for info, data in files:
        tar.addfile(info, io.BytesIO(data) if data else None)
layer_tar = raw.getvalue()
layer_gz = gzip.compress(layer_tar, mtime=epoch)

blobs = os.path.join(out, "blobs", "sha256")
os.makedirs(blobs)


def blob(data):
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(blobs, digest), "wb") as f:
        f.write(data)
    return {"digest": "sha256:" + digest, "size": len(data)}


created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
config = {
    "created": created,
    "architecture": "amd64",
    "os": "linux",
    "config": {
        "User": f"{UID}:{GID}",
        "Entrypoint": ["/usr/bin/linerate"],
        "Cmd": ["serve", "--config", "/etc/linerate/linerate.toml"],
        "ExposedPorts": {"8080/tcp": {}, "9090/tcp": {}},
        "WorkingDir": "/",
        "Labels": {"org.opencontainers.image.title": "linerate", "org.opencontainers.image.version": tag},
    },
    "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer_tar).hexdigest()]},
    "history": [{"created": created, "created_by": "scripts/build-image.sh: static linerate on scratch"}],
}
config_desc = dict(mediaType="application/vnd.oci.image.config.v1+json",
                   **blob(json.dumps(config, sort_keys=True).encode()))
layer_desc = dict(mediaType="application/vnd.oci.image.layer.v1.tar+gzip", **blob(layer_gz))
manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": config_desc, "layers": [layer_desc]}
manifest_desc = dict(mediaType="application/vnd.oci.image.manifest.v1+json",
                     **blob(json.dumps(manifest, sort_keys=True).encode()),
                     annotations={"org.opencontainers.image.ref.name": tag},
                     platform={"architecture": "amd64", "os": "linux"})
with open(os.path.join(out, "index.json"), "w") as f:
    json.dump({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
               "manifests": [manifest_desc]}, f, sort_keys=True)
with open(os.path.join(out, "oci-layout"), "w") as f:
    json.dump({"imageLayoutVersion": "1.0.0"}, f)
print(f"image {manifest_desc['digest']} ({len(layer_gz)} bytes compressed)")
PY
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@"${SOURCE_DATE_EPOCH:-0}" \
    -C "$out" -cf "$out.tar" .

echo "== check: the image's own binary, from its unpacked layer"
root=$(mktemp -d)
chmod 0755 "$root"  # the image root, as a runtime makes it: 10001 must traverse it
trap 'rm -rf "$root"' EXIT
# Follow the layout as a runtime does: index -> manifest -> config and layer, each
# checked against its digest.
python3 - "$out" "$root" <<'PY'
import hashlib, json, os, sys, tarfile

out, root = sys.argv[1], sys.argv[2]


def read(desc):
    algo, digest = desc["digest"].split(":")
    data = open(os.path.join(out, "blobs", algo, digest), "rb").read()
    assert hashlib.sha256(data).hexdigest() == digest and len(data) == desc["size"], desc
    return data


index = json.load(open(os.path.join(out, "index.json")))
manifest = json.loads(read(index["manifests"][0]))
config = json.loads(read(manifest["config"]))
assert config["config"]["User"] == "10001:10001", "not non-root"
assert config["config"]["Entrypoint"] == ["/usr/bin/linerate"]
layer = manifest["layers"][0]
path = os.path.join(out, "blobs", *layer["digest"].split(":"))
read(layer)
with tarfile.open(path, "r:gz") as tar:
    names = tar.getnames()
    assert not any(n.split("/")[-1] in ("sh", "bash", "busybox") for n in names), names
    tar.extractall(root, filter="tar")
print("ok  index, manifest, config and layer digests; user 10001; no shell in the image")
PY
if [ "$(id -u)" != 0 ]; then
    echo "build-image: the check runs the binary in a chroot of the layer: run as root" >&2
    exit 1
fi
chroot --userspec=10001:10001 "$root" /usr/bin/linerate --version
# deploy/kubernetes' ConfigMap as a pod sees it: its file at /etc/linerate, the
# Secret's keys at /etc/linerate-secret, POD_NAME set.
python3 - "$root" <<'PY'
import os, sys
root = sys.argv[1]
text = open("deploy/kubernetes/configmap.yaml").read()
lines = text.split("linerate.toml: |\n", 1)[1].splitlines()
toml = "\n".join(l[4:] for l in lines if l.startswith("    ") or not l.strip()) + "\n"
open(os.path.join(root, "etc/linerate/linerate.toml"), "w").write(toml)
os.makedirs(os.path.join(root, "etc/linerate-secret"))
open(os.path.join(root, "etc/linerate-secret/admin-token"), "w").write("image-check-admin-token-0123456789")
open(os.path.join(root, "etc/linerate-secret/cluster.key"), "w").write("image-check-cluster-key-0123456789abcdef")
PY
env -i POD_NAME=linerate-0 "$(command -v chroot)" --userspec=10001:10001 "$root" \
    /usr/bin/linerate check-config /etc/linerate/linerate.toml >/dev/null
echo "ok  the image's linerate runs as 10001 and accepts deploy/kubernetes' ConfigMap"
# It serves: cache mode in front of an origin named by host name, resolved by the
# static binary from the image's /etc/hosts (as a pod's, which the kubelet writes).
ports=$(python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1", 0)) for x in s]
print(*[x.getsockname()[1] for x in s])')
oport=${ports% *}
sport=${ports#* }
mkdir -p "$root/srv"
echo "served through the image" >"$root/srv/probe.txt"
echo "127.0.0.1 origin.image-check" >"$root/etc/hosts"
printf '%s\n' "[server]" "listen = [\"127.0.0.1:$sport\"]" "workers = 1" \
    "[admin]" "listen = \"off\"" "[cache]" "durability = \"no_sync\"" \
    "[[cache.disk]]" "name = \"d0\"" "path = \"/var/cache/linerate/d0\"" "max_bytes = \"100M\"" \
    "[[origin]]" "name = \"o\"" "servers = [\"http://origin.image-check:$oport\"]" \
    "[[route]]" "path_prefix = \"/\"" "origin = \"o\"" >"$root/etc/linerate/serve.toml"
python3 -m http.server "$oport" --bind 127.0.0.1 --directory "$root/srv" >/dev/null 2>&1 &
origin_pid=$!
chroot --userspec=10001:10001 "$root" /usr/bin/linerate serve --config /etc/linerate/serve.toml 2>"$root/serve.log" &
serve_pid=$!
trap 'kill "$serve_pid" "$origin_pid" 2>/dev/null; rm -rf "$root"' EXIT
for _ in $(seq 100); do grep -q "listening on" "$root/serve.log" && break; sleep 0.1; done
got=$(python3 -c 'import sys, urllib.request
r = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/probe.txt", headers={"Host": "video.test"})
print(urllib.request.urlopen(r, timeout=10).read().decode().strip())' "$sport" 2>&1 || true)
if [ "$got" != "served through the image" ]; then
    echo "build-image: the image's linerate did not serve the origin's object: $got" >&2
    cat "$root/serve.log" >&2
    exit 1
fi
echo "ok  the image's linerate serves an origin named by host name (static name resolution)"
echo "image: $out ($out.tar), tag $tag"
