#!/usr/bin/env bash
# Fetch the pinned dash.js release from the npm registry, check it against the pinned
# sha256, and copy dist/modern/umd/dash.mediaplayer.min.js, its third-party license
# notes and LICENSE.md into crates/linerate-server/assets/vendor/dash.js/ (embedded in
# the binary by the admin API). The same steps as scripts/vendor-hlsjs.sh.
#
# To update: set VERSION to the new release, run with SHA256= (empty) to print the new
# tarball's digest, check the release notes, pin the printed digest here, run again,
# then update the version and digests in assets/vendor/dash.js/README.md and the `?v=`
# in assets/dash-player.html (the browser caches the file for a year under that URL).
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=5.2.1
# sha256 of https://registry.npmjs.org/dashjs/-/dashjs-5.2.1.tgz
SHA256=${SHA256-4eacb0cc3525276666ca3f084611cdabb5a2264d128dfe0750fe106fbddd088f}

dest=crates/linerate-server/assets/vendor/dash.js
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "dashjs@$VERSION" >/dev/null)
tgz="$tmp/dashjs-$VERSION.tgz"
got=$(sha256sum "$tgz" | cut -d' ' -f1)
if [ -z "$SHA256" ]; then
    echo "dashjs-$VERSION.tgz sha256 $got (pin it in $0)"
    exit 0
fi
if [ "$got" != "$SHA256" ]; then
    echo "sha256 mismatch for dashjs-$VERSION.tgz: got $got, pinned $SHA256" >&2
    exit 1
fi
tar -xzf "$tgz" -C "$tmp"
mkdir -p "$dest"
cp "$tmp/package/dist/modern/umd/dash.mediaplayer.min.js" "$dest/dash.mediaplayer.min.js"
cp "$tmp/package/dist/modern/umd/dash.mediaplayer.min.js.LICENSE.txt" "$dest/dash.mediaplayer.min.js.LICENSE.txt"
cp "$tmp/package/LICENSE.md" "$dest/LICENSE.md"
sha256sum "$dest/dash.mediaplayer.min.js"
