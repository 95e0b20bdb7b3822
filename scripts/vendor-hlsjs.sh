#!/usr/bin/env bash
# Fetch the pinned hls.js release from the npm registry, check it against the pinned
# sha256, and copy dist/hls.light.min.js and LICENSE into
# crates/linerate-server/assets/vendor/hls.js/ (embedded in the binary by the admin API).
#
# To update: set VERSION to the new release, run with SHA256= (empty) to print the new
# tarball's digest, check the release notes, pin the printed digest here, run again,
# then update the version and digests in assets/vendor/hls.js/README.md and the `?v=`
# in assets/player.html (the browser caches the file for a year under that URL).
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=1.7.4
# sha256 of https://registry.npmjs.org/hls.js/-/hls.js-1.7.4.tgz
SHA256=${SHA256-e4ab3d5d13f7cca9ef241d098f39686e19fd451831ba07dc9943482fd5ff75c7}

dest=crates/linerate-server/assets/vendor/hls.js
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "hls.js@$VERSION" >/dev/null)
tgz="$tmp/hls.js-$VERSION.tgz"
got=$(sha256sum "$tgz" | cut -d' ' -f1)
if [ -z "$SHA256" ]; then
    echo "hls.js-$VERSION.tgz sha256 $got (pin it in $0)"
    exit 0
fi
if [ "$got" != "$SHA256" ]; then
    echo "sha256 mismatch for hls.js-$VERSION.tgz: got $got, pinned $SHA256" >&2
    exit 1
fi
tar -xzf "$tgz" -C "$tmp"
cp "$tmp/package/dist/hls.light.min.js" "$dest/hls.light.min.js"
cp "$tmp/package/LICENSE" "$dest/LICENSE"
sha256sum "$dest/hls.light.min.js"
