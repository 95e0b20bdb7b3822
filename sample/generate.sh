#!/usr/bin/env bash
# generate.sh — rebuild the bundled sample library that `linerate serve` serves when it
# is given no configuration.
#
# What it owns: the test content under sample/ (hls/, hls-byterange/, dash/, video.mp4).
# What it does not do: it is never run by CI or by the build. Its output is committed, so
# a checkout serves video without ffmpeg installed. Run it by hand only to change the
# content, and then update the ffmpeg version and command in sample/README.md.
#
# Needs ffmpeg with libx264 and the native AAC encoder:
#   Debian/Ubuntu:  apt-get install -y ffmpeg
#
# Every packaging is a remux (-c copy) of ONE encode, so the HLS, byte-range HLS, DASH
# and MP4 files carry the same frames. The output is deterministic for a given ffmpeg
# build: bitexact muxers and encoders, no metadata, single-threaded x264, a synthetic
# source (testsrc2 + sine). Re-running with the same ffmpeg must leave `git status`
# clean; a different ffmpeg version may change bytes.
#
# Usage: sample/generate.sh            (from anywhere; writes next to this script)

set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

command -v ffmpeg >/dev/null || {
    echo "generate.sh: ffmpeg not found; install it with: apt-get install -y ffmpeg" >&2
    exit 1
}

# Content parameters. Small on purpose: the whole sample/ directory must stay well under
# 3 MB because it lives in git.
DURATION=8        # seconds of content: four 2 s segments per rendition
FPS=25            # frames per second
GOP=$((FPS * 2))  # one keyframe every 2 s, so every segment starts on a keyframe
SIZE=426x240      # the smallest common 16:9 ladder rung ("240p")
VBITRATE=250k     # H.264 Main; ~250 KB of video for 8 s
ABITRATE=64k      # AAC-LC mono 48 kHz, a 440 Hz sine tone
# The AAC encoder adds one 1024-sample priming frame; with a full 8 s of samples the
# last packet spills past 8.0 s and DASH writes a fifth, 350-byte audio segment that no
# manifest entry references. Ending the tone one frame early keeps four segments per
# track (audio is 21 ms shorter than video, which players ignore).
AUDIO_SAMPLES=$(( (DURATION * 48000 / 1024 - 1) * 1024 ))

# Flags that strip everything run-dependent (dates, encoder version strings, metadata).
BITEXACT=(-fflags +bitexact -flags:v +bitexact -flags:a +bitexact -map_metadata -1 -map_chapters -1)

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "generate.sh: encoding ${DURATION}s of ${SIZE} test pattern with $(ffmpeg -version | head -n1)" >&2

# 1. The one encode. Fragment-free MP4 is the mezzanine every packaging copies from.
ffmpeg -nostdin -hide_banner -loglevel error -y \
    -f lavfi -i "testsrc2=size=${SIZE}:rate=${FPS}:duration=${DURATION}" \
    -f lavfi -i "sine=frequency=440:sample_rate=48000:duration=${DURATION}" \
    -map 0:v -map 1:a \
    -c:v libx264 -profile:v main -preset medium -threads 1 -pix_fmt yuv420p \
    -b:v "$VBITRATE" -maxrate "$VBITRATE" -bufsize 500k \
    -g "$GOP" -keyint_min "$GOP" -sc_threshold 0 -x264-params "rc-lookahead=25" \
    -af "atrim=end_sample=$AUDIO_SAMPLES" -c:a aac -b:a "$ABITRATE" -ac 1 \
    "${BITEXACT[@]}" \
    "$work/mezzanine.mp4"

rm -rf hls hls-byterange dash video.mp4
mkdir -p hls hls-byterange dash

# 2a. HLS, MPEG-TS segments of 2 s, a VOD media playlist and a master playlist.
ffmpeg -nostdin -hide_banner -loglevel error -y -i "$work/mezzanine.mp4" \
    -map 0 -c copy "${BITEXACT[@]}" \
    -f hls -hls_time 2 -hls_playlist_type vod -hls_list_size 0 \
    -hls_segment_type mpegts -hls_segment_filename "hls/segment_%03d.ts" \
    -master_pl_name master.m3u8 \
    hls/index.m3u8

# 2b. Byte-range HLS: one .ts file, the playlist addresses segments with EXT-X-BYTERANGE.
ffmpeg -nostdin -hide_banner -loglevel error -y -i "$work/mezzanine.mp4" \
    -map 0 -c copy "${BITEXACT[@]}" \
    -f hls -hls_time 2 -hls_playlist_type vod -hls_list_size 0 \
    -hls_flags single_file -hls_segment_filename "hls-byterange/media.ts" \
    -master_pl_name master.m3u8 \
    hls-byterange/index.m3u8

# 2c. DASH, fMP4 (CMAF-style) init + media segments, one adaptation set per media type,
#     a static (VOD) MPD with a SegmentTemplate of numbered segments.
ffmpeg -nostdin -hide_banner -loglevel error -y -i "$work/mezzanine.mp4" \
    -map 0:v -map 0:a -c copy "${BITEXACT[@]}" \
    -f dash -seg_duration 2 -use_template 1 -use_timeline 0 \
    -adaptation_sets "id=0,streams=v id=1,streams=a" \
    -init_seg_name 'init-$RepresentationID$.m4s' \
    -media_seg_name 'chunk-$RepresentationID$-$Number%05d$.m4s' \
    -write_prft 0 \
    dash/manifest.mpd

# 2d. Progressive MP4 with the moov atom first (faststart), for byte-range playback.
ffmpeg -nostdin -hide_banner -loglevel error -y -i "$work/mezzanine.mp4" \
    -map 0 -c copy "${BITEXACT[@]}" -movflags +faststart \
    video.mp4

echo "generate.sh: done; $(du -sh --apparent-size "$here" | cut -f1) in $here" >&2
