//! DASH MPDs (ISO/IEC 23009-1) read for the objects they name, so a fill job can fetch
//! every segment of every representation ahead of the players. Pure: bytes in, request
//! targets out.
//!
//! Handled: static MPDs (`type="static"`, the default); `BaseURL` at every level
//! (relative references, resolved per RFC 3986 like HLS URIs, `hls::resolve`);
//! `SegmentTemplate` at Period, AdaptationSet and Representation level (a lower level's
//! attributes override), with `@duration` (the period's length decides the count) or a
//! `SegmentTimeline` (`S@t`, `@d`, `@r`, a negative `@r` repeating to the period's end),
//! `$RepresentationID$`, `$Number$`, `$Bandwidth$`, `$Time$` with `%0Nd` widths and `$$`;
//! `SegmentList` (`Initialization@sourceURL`, `SegmentURL@media`, `@mediaRange`); a Representation
//! with only a `BaseURL` (one file, `SegmentBase`, with its `@indexRange` when it has
//! one: where the file's `sidx` is, `crate::sidx`). Not handled (an error, so a job
//! reports it rather than filling part of a presentation): dynamic (live) MPDs,
//! absolute `BaseURL`s, `$SubNumber$` and other identifiers, xlink.
//!
//! XML is read with quick-xml into a small tree (bounded: [`MAX_MPD_BYTES`], depth
//! [`MAX_DEPTH`]).

use quick_xml::events::{BytesStart, Event};
use quick_xml::{Reader, XmlVersion};

use crate::hls::{self, SubRange};

/// Largest MPD read (a long SegmentTimeline is a few hundred KiB).
pub const MAX_MPD_BYTES: usize = 4 << 20;

/// Deepest element nesting accepted (an MPD is about six deep).
pub const MAX_DEPTH: usize = 32;

/// Most XML elements read from one MPD: the tree is built in memory, and an MPD this
/// reader can use has a few per representation plus one per `S` or `SegmentURL`.
pub const MAX_ELEMENTS: usize = 200_000;

/// Most objects one MPD may name.
pub const MAX_SEGMENTS: usize = 1_000_000;

/// Whether a path (no query) ends in `.mpd`, case ignored.
pub fn is_mpd_path(path: &[u8]) -> bool {
    path.len() >= 4 && path[path.len() - 4..].eq_ignore_ascii_case(b".mpd")
}

/// Whether a `Content-Type` value names an MPD (`application/dash+xml`; parameters and
/// case ignored).
pub fn is_mpd_type(content_type: &[u8]) -> bool {
    crate::mime::essence(content_type).eq_ignore_ascii_case(b"application/dash+xml")
}

/// Whether `body` looks like an XML document (so not an HLS playlist).
pub fn looks_like_xml(body: &[u8]) -> bool {
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    body.trim_ascii_start().starts_with(b"<")
}

#[derive(Debug, Default)]
struct Node {
    name: String,
    attrs: Vec<(String, String)>,
    text: String,
    children: Vec<Node>,
}

impl Node {
    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn child(&self, name: &str) -> Option<&Node> {
        self.children.iter().find(|c| c.name == name)
    }

    fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Node> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }
}

fn element(e: &BytesStart<'_>) -> Result<Node, &'static str> {
    let name = String::from_utf8_lossy(e.local_name().as_ref()).into_owned();
    let mut attrs = Vec::new();
    for a in e.attributes() {
        let a = a.map_err(|_| "bad XML attribute")?;
        let key = String::from_utf8_lossy(a.key.local_name().as_ref()).into_owned();
        let value = a
            .normalized_value(XmlVersion::Implicit1_0)
            .map_err(|_| "bad XML attribute")?;
        attrs.push((key, value.into_owned()));
    }
    Ok(Node {
        name,
        attrs,
        ..Node::default()
    })
}

fn tree(body: &[u8]) -> Result<Node, &'static str> {
    if body.len() > MAX_MPD_BYTES {
        return Err("MPD too large");
    }
    let text = std::str::from_utf8(body).map_err(|_| "MPD is not UTF-8")?;
    let mut reader = Reader::from_str(text);
    let mut stack = vec![Node::default()];
    let mut elements = 0usize;
    loop {
        let event = reader.read_event().map_err(|_| "not XML")?;
        let top = stack.len() - 1;
        if matches!(event, Event::Start(_) | Event::Empty(_)) {
            elements += 1;
            if elements > MAX_ELEMENTS {
                return Err("MPD has too many elements");
            }
        }
        match event {
            Event::Start(e) => {
                if stack.len() > MAX_DEPTH {
                    return Err("MPD nested too deep");
                }
                stack.push(element(&e)?);
            }
            Event::Empty(e) => stack[top].children.push(element(&e)?),
            Event::End(_) => {
                let node = stack.pop().ok_or("not XML")?;
                let Some(parent) = stack.last_mut() else {
                    return Err("not XML");
                };
                parent.children.push(node);
            }
            Event::Text(t) => stack[top]
                .text
                .push_str(&t.decode().map_err(|_| "not XML")?),
            Event::CData(t) => stack[top]
                .text
                .push_str(&t.decode().map_err(|_| "not XML")?),
            Event::GeneralRef(r) => {
                let name = String::from_utf8_lossy(&r);
                let c = match name.as_ref() {
                    "amp" => '&',
                    "lt" => '<',
                    "gt" => '>',
                    "quot" => '"',
                    "apos" => '\'',
                    n => n
                        .strip_prefix("#x")
                        .and_then(|h| u32::from_str_radix(h, 16).ok())
                        .or_else(|| n.strip_prefix('#').and_then(|d| d.parse().ok()))
                        .and_then(char::from_u32)
                        .ok_or("unknown XML entity")?,
                };
                stack[top].text.push(c);
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if stack.len() != 1 {
        return Err("not XML");
    }
    stack.pop().ok_or("not XML")
}

/// An ISO 8601 duration as MPDs write it (`PT1H2M3.5S`, `P1DT2H`), in seconds.
pub fn duration_seconds(s: &str) -> Option<f64> {
    let rest = s.trim().strip_prefix('P')?;
    let (date, time) = match rest.split_once('T') {
        Some((d, t)) => (d, t),
        None => (rest, ""),
    };
    let mut total = 0.0;
    let mut take = |part: &str, units: &[(char, f64)]| -> Option<()> {
        let mut num = String::new();
        for c in part.chars() {
            if c.is_ascii_digit() || c == '.' {
                num.push(c);
            } else {
                let scale = units.iter().find(|(u, _)| *u == c)?.1;
                total += num.parse::<f64>().ok()? * scale;
                num.clear();
            }
        }
        num.is_empty().then_some(())
    };
    take(
        date,
        &[
            ('Y', 365.0 * 86400.0),
            ('M', 30.0 * 86400.0),
            ('W', 7.0 * 86400.0),
            ('D', 86400.0),
        ],
    )?;
    take(time, &[('H', 3600.0), ('M', 60.0), ('S', 1.0)])?;
    Some(total)
}

/// The `SegmentTemplate` in effect: each level's attributes over its parent's.
#[derive(Debug, Clone, Default)]
struct Template {
    media: Option<String>,
    initialization: Option<String>,
    start_number: Option<u64>,
    timescale: Option<u64>,
    duration: Option<u64>,
    /// `(t, d, r)` of each `S`.
    timeline: Option<Vec<(Option<u64>, u64, i64)>>,
}

impl Template {
    fn over(&self, node: Option<&Node>) -> Result<Template, &'static str> {
        let Some(n) = node else {
            return Ok(self.clone());
        };
        let num = |name: &str| -> Result<Option<u64>, &'static str> {
            n.attr(name)
                .map(|v| v.trim().parse().map_err(|_| "bad SegmentTemplate number"))
                .transpose()
        };
        let timeline = match n.child("SegmentTimeline") {
            Some(tl) => {
                let mut out = Vec::new();
                for s in tl.all("S") {
                    let t = s
                        .attr("t")
                        .map(|v| v.trim().parse().map_err(|_| "bad S@t"))
                        .transpose()?;
                    let d = s
                        .attr("d")
                        .ok_or("S without @d")?
                        .trim()
                        .parse()
                        .map_err(|_| "bad S@d")?;
                    let r = s
                        .attr("r")
                        .map(|v| v.trim().parse().map_err(|_| "bad S@r"))
                        .transpose()?
                        .unwrap_or(0);
                    out.push((t, d, r));
                }
                Some(out)
            }
            None => self.timeline.clone(),
        };
        Ok(Template {
            media: n.attr("media").map(str::to_owned).or(self.media.clone()),
            initialization: n
                .attr("initialization")
                .map(str::to_owned)
                .or(self.initialization.clone()),
            start_number: num("startNumber")?.or(self.start_number),
            timescale: num("timescale")?.or(self.timescale),
            duration: num("duration")?.or(self.duration),
            timeline,
        })
    }
}

/// Fill `$Identifier$`s of a template.
fn substitute(
    template: &str,
    id: &str,
    bandwidth: &str,
    number: u64,
    time: u64,
) -> Result<String, &'static str> {
    let mut out = String::with_capacity(template.len() + 16);
    let mut parts = template.split('$');
    out.push_str(parts.next().unwrap_or(""));
    let mut inside = true;
    for part in parts {
        if !inside {
            out.push_str(part);
            inside = true;
            continue;
        }
        inside = false;
        if part.is_empty() {
            out.push('$');
            continue;
        }
        let (name, width) = match part.split_once('%') {
            Some((n, f)) => {
                let w = f
                    .strip_prefix('0')
                    .and_then(|f| f.strip_suffix('d'))
                    .and_then(|w| w.parse::<usize>().ok())
                    .filter(|w| *w <= 32)
                    .ok_or("bad $Identifier%0Nd$ format")?;
                (n, w)
            }
            None => (part, 0),
        };
        match name {
            "RepresentationID" if width == 0 => out.push_str(id),
            "Bandwidth" => out.push_str(&format!(
                "{:0width$}",
                bandwidth.parse::<u64>().map_err(|_| "bad @bandwidth")?
            )),
            "Number" => out.push_str(&format!("{number:0width$}")),
            "Time" => out.push_str(&format!("{time:0width$}")),
            _ => return Err("unsupported $Identifier$ in a template"),
        }
    }
    if !inside {
        return Err("unbalanced $ in a template");
    }
    Ok(out)
}

/// `base` with `node`'s `BaseURL` applied.
fn with_base(base: &[u8], node: &Node) -> Result<Vec<u8>, &'static str> {
    match node.child("BaseURL") {
        Some(b) if !b.text.trim().is_empty() => hls::resolve(base, b.text.trim().as_bytes())
            .ok_or("BaseURL not followed (absolute, or not a plain relative reference)"),
        _ => Ok(base.to_vec()),
    }
}

/// Every object a static MPD requested as `target` (origin form, `/path[?query]`)
/// names, as origin-form targets on the same host: per representation, its
/// initialization segment and then its media segments, in document order.
pub fn objects(body: &[u8], target: &[u8]) -> Result<Vec<Vec<u8>>, &'static str> {
    Ok(representations(body, target, false)?
        .into_iter()
        .flat_map(|r| r.init.into_iter().chain(r.media))
        .collect())
}

/// The objects of one representation (of one period), as origin-form targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Representation {
    /// Its initialization segment, if it has one.
    pub init: Option<Vec<u8>>,
    /// Its media segments (or its one file), in playback order.
    pub media: Vec<Vec<u8>>,
    /// The byte range of each of `media` (`SegmentURL@mediaRange`: ffmpeg's dash muxer
    /// with `-single_file 1` lists one file's fragments so), in step with it; `None`:
    /// the whole object.
    pub ranges: Vec<Option<SubRange>>,
    /// One file (`SegmentBase`) with a segment index: `SegmentBase@indexRange`, the
    /// bytes `first..=last` of the file holding its `sidx` (see `crate::sidx`).
    pub index: Option<(u64, u64)>,
    /// The AdaptationSet it is in, numbered in document order across the MPD's periods:
    /// the representations of one set are the alternatives a player switches between.
    pub set: usize,
}

/// `a-b` (`SegmentBase@indexRange`, `SegmentURL@mediaRange`): inclusive, `a <= b`,
/// `b < u64::MAX`.
fn byte_range(v: &str) -> Result<(u64, u64), &'static str> {
    let (a, b) = v.trim().split_once('-').ok_or("bad indexRange")?;
    let num = |n: &str| {
        let n = n.trim();
        if n.is_empty() || !n.bytes().all(|c| c.is_ascii_digit()) {
            return Err("bad indexRange");
        }
        n.parse::<u64>().map_err(|_| "bad indexRange")
    };
    let (a, b) = (num(a)?, num(b)?);
    if b < a || b == u64::MAX {
        return Err("bad indexRange");
    }
    Ok((a, b))
}

/// The representations of an MPD requested as `target`, each with its objects (see
/// [`objects`]). `live`: accept a dynamic MPD too, for the segments its timelines list
/// now (segment prefetch, which follows a player: what exists is what the timeline
/// says; a template numbered by `@duration` in a live period has no known end and is
/// refused as in a static one).
pub fn representations(
    body: &[u8],
    target: &[u8],
    live: bool,
) -> Result<Vec<Representation>, &'static str> {
    let root = tree(body)?;
    let mpd = root.child("MPD").ok_or("not an MPD")?;
    if !live && mpd.attr("type").is_some_and(|t| t.trim() == "dynamic") {
        return Err("live (dynamic) MPD");
    }
    let total = mpd
        .attr("mediaPresentationDuration")
        .and_then(duration_seconds);
    let base0 = with_base(target, mpd)?;
    let periods: Vec<&Node> = mpd.all("Period").collect();
    let mut reps: Vec<Representation> = Vec::new();
    // Objects named so far, all representations together (bounded by MAX_SEGMENTS).
    let mut named = 0usize;
    let mut sets = 0usize;
    let mut start = 0.0;
    for (i, period) in periods.iter().enumerate() {
        if let Some(s) = period.attr("start").and_then(duration_seconds) {
            start = s;
        }
        let next_start = periods
            .get(i + 1)
            .and_then(|p| p.attr("start"))
            .and_then(duration_seconds);
        let length = period
            .attr("duration")
            .and_then(duration_seconds)
            .or(next_start.map(|n| n - start))
            .or(total.map(|t| t - start));
        let base1 = with_base(&base0, period)?;
        let t1 = Template::default().over(period.child("SegmentTemplate"))?;
        for set in period.all("AdaptationSet") {
            let set_number = sets;
            sets += 1;
            let base2 = with_base(&base1, set)?;
            let t2 = t1.over(set.child("SegmentTemplate"))?;
            let set_list = set.child("SegmentList");
            for rep in set.all("Representation") {
                let base3 = with_base(&base2, rep)?;
                let t3 = t2.over(rep.child("SegmentTemplate"))?;
                let id = rep.attr("id").unwrap_or("");
                let bandwidth = rep.attr("bandwidth").unwrap_or("0");
                let resolve = |r: &str| -> Result<Vec<u8>, &'static str> {
                    hls::resolve(&base3, r.as_bytes()).ok_or("segment URI not followed")
                };
                let mut init: Option<Vec<u8>> = None;
                let mut out: Vec<Vec<u8>> = Vec::new();
                let mut index = None;
                let mut ranges: Vec<Option<SubRange>> = Vec::new();
                if let Some(list) = rep.child("SegmentList").or(set_list) {
                    if let Some(src) = list
                        .child("Initialization")
                        .and_then(|n| n.attr("sourceURL"))
                    {
                        init = Some(resolve(src)?);
                    }
                    for s in list.all("SegmentURL") {
                        match s.attr("media") {
                            Some(m) => out.push(resolve(m)?),
                            None => out.push(base3.clone()),
                        }
                        let range = s.attr("mediaRange").map(byte_range).transpose()?;
                        ranges.push(range.map(|(a, b)| SubRange {
                            offset: a,
                            len: b - a + 1,
                        }));
                    }
                } else if let Some(media) = &t3.media {
                    let timescale = t3.timescale.unwrap_or(1).max(1);
                    let first = t3.start_number.unwrap_or(1);
                    if let Some(i) = &t3.initialization {
                        init = Some(resolve(&substitute(i, id, bandwidth, first, 0)?)?);
                    }
                    let end = length.map(|l| (l.max(0.0) * timescale as f64).round() as u64);
                    let mut number = first;
                    if let Some(timeline) = &t3.timeline {
                        let mut t = 0u64;
                        for (k, &(st, d, r)) in timeline.iter().enumerate() {
                            if let Some(st) = st {
                                t = st;
                            }
                            if d == 0 {
                                return Err("S@d of 0");
                            }
                            let repeats = if r >= 0 {
                                r as u64 + 1
                            } else {
                                // To the next S's start, else the period's end.
                                let until = timeline
                                    .get(k + 1)
                                    .and_then(|s| s.0)
                                    .or(end)
                                    .ok_or("S@r of -1 in a period of unknown length")?;
                                until.saturating_sub(t).div_ceil(d)
                            };
                            for _ in 0..repeats {
                                out.push(resolve(&substitute(media, id, bandwidth, number, t)?)?);
                                number = number.checked_add(1).ok_or("segment number overflows")?;
                                t = t.checked_add(d).ok_or("S@t overflows")?;
                                if named + out.len() > MAX_SEGMENTS {
                                    return Err("MPD names too many segments");
                                }
                            }
                        }
                    } else {
                        let d = t3
                            .duration
                            .filter(|d| *d > 0)
                            .ok_or("SegmentTemplate without @duration or SegmentTimeline")?;
                        let end =
                            end.ok_or("SegmentTemplate@duration in a period of unknown length")?;
                        let count = end.div_ceil(d);
                        if named.saturating_add(usize::try_from(count).unwrap_or(usize::MAX))
                            > MAX_SEGMENTS
                        {
                            return Err("MPD names too many segments");
                        }
                        for k in 0..count {
                            out.push(resolve(&substitute(media, id, bandwidth, number, k * d)?)?);
                            number = number.checked_add(1).ok_or("segment number overflows")?;
                        }
                    }
                } else if base3 != base2 {
                    // One file per representation (SegmentBase, inherited from the
                    // adaptation set or the period when the representation has none).
                    out.push(base3.clone());
                    index = rep
                        .child("SegmentBase")
                        .or(set.child("SegmentBase"))
                        .or(period.child("SegmentBase"))
                        .and_then(|b| b.attr("indexRange"))
                        .map(byte_range)
                        .transpose()?;
                } else {
                    return Err("Representation with no segments this reader knows");
                }
                named += out.len() + usize::from(init.is_some());
                if named > MAX_SEGMENTS {
                    return Err("MPD names too many segments");
                }
                ranges.resize(out.len(), None);
                reps.push(Representation {
                    init,
                    media: out,
                    ranges,
                    index,
                    set: set_number,
                });
            }
        }
        if let Some(l) = length {
            start += l;
        }
    }
    Ok(reps)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    fn text(v: Vec<Vec<u8>>) -> Vec<String> {
        v.into_iter()
            .map(|t| String::from_utf8(t).unwrap())
            .collect()
    }

    #[test]
    fn the_bundled_sample() {
        let mpd = include_bytes!("../../../sample/dash/manifest.mpd");
        let got = text(objects(mpd, b"/dash/manifest.mpd").unwrap());
        let mut want = Vec::new();
        for r in 0..2 {
            want.push(format!("/dash/init-{r}.m4s"));
            for n in 1..=4 {
                want.push(format!("/dash/chunk-{r}-{n:05}.m4s"));
            }
        }
        assert_eq!(got, want);
    }

    #[test]
    fn timeline_base_urls_and_lists() {
        let mpd = br#"<?xml version="1.0"?>
<MPD xmlns="urn:mpeg:dash:schema:mpd:2011" mediaPresentationDuration="PT10S">
  <BaseURL>media/</BaseURL>
  <Period>
    <AdaptationSet>
      <SegmentTemplate timescale="10" media="$RepresentationID$/t$Time$.m4s?b=$Bandwidth$&amp;x=1" initialization="$RepresentationID$/init.m4s">
        <SegmentTimeline><S t="0" d="40" r="1"/><S d="20" r="-1"/></SegmentTimeline>
      </SegmentTemplate>
      <Representation id="v1" bandwidth="800"/>
    </AdaptationSet>
    <AdaptationSet>
      <Representation id="a"><BaseURL>audio/</BaseURL>
        <SegmentList><Initialization sourceURL="i.mp4"/><SegmentURL media="s1.mp4"/><SegmentURL media="s2.mp4"/></SegmentList>
      </Representation>
      <Representation id="whole"><BaseURL>../whole.mp4</BaseURL><SegmentBase/></Representation>
    </AdaptationSet>
  </Period>
</MPD>"#;
        let got = text(objects(mpd, b"/vod/x/manifest.mpd?tok=1").unwrap());
        assert_eq!(
            got,
            vec![
                "/vod/x/media/v1/init.m4s",
                "/vod/x/media/v1/t0.m4s?b=800&x=1",
                "/vod/x/media/v1/t40.m4s?b=800&x=1",
                "/vod/x/media/v1/t80.m4s?b=800&x=1",
                "/vod/x/media/audio/i.mp4",
                "/vod/x/media/audio/s1.mp4",
                "/vod/x/media/audio/s2.mp4",
                "/vod/x/whole.mp4",
            ]
        );
    }

    #[test]
    fn a_live_timeline_is_read_only_when_asked_for() {
        let mpd = br#"<MPD type="dynamic"><Period start="PT0S"><AdaptationSet>
            <SegmentTemplate timescale="90000" startNumber="100" media="v/$Time$_$Number$.m4s">
            <SegmentTimeline><S t="900000" d="180000" r="1"/><S d="90000"/></SegmentTimeline>
            </SegmentTemplate><Representation id="v" bandwidth="1"/></AdaptationSet></Period></MPD>"#;
        assert_eq!(objects(mpd, b"/live/m.mpd"), Err("live (dynamic) MPD"));
        let reps = representations(mpd, b"/live/m.mpd", true).unwrap();
        assert_eq!(reps.len(), 1);
        assert_eq!(reps[0].init, None);
        assert_eq!(reps[0].index, None);
        assert_eq!(
            text(reps[0].media.clone()),
            [
                "/live/v/900000_100.m4s",
                "/live/v/1080000_101.m4s",
                "/live/v/1260000_102.m4s"
            ]
        );
    }

    /// ffmpeg's dash muxer with `-single_file 1`: one file per representation, its
    /// `sidx` at `SegmentBase@indexRange` (inherited from the adaptation set when the
    /// representation has no `SegmentBase` of its own).
    #[test]
    fn segment_base_index_ranges() {
        let mpd = br#"<MPD mediaPresentationDuration="PT8S"><Period><AdaptationSet>
            <Representation id="0" bandwidth="1"><BaseURL>v0.mp4</BaseURL>
              <SegmentBase indexRange="883-954" timescale="12800"><Initialization range="0-882"/></SegmentBase>
            </Representation></AdaptationSet>
            <AdaptationSet><SegmentBase indexRange="10-20"/>
              <Representation id="1" bandwidth="1"><BaseURL>a.mp4</BaseURL></Representation>
              <Representation id="2" bandwidth="1"><BaseURL>b.mp4</BaseURL><SegmentBase/></Representation>
            </AdaptationSet></Period></MPD>"#;
        let reps = representations(mpd, b"/d/m.mpd", false).unwrap();
        let got: Vec<_> = reps
            .iter()
            .map(|r| (text(r.media.clone()), r.index))
            .collect();
        assert_eq!(
            got,
            [
                (vec!["/d/v0.mp4".to_owned()], Some((883, 954))),
                (vec!["/d/a.mp4".to_owned()], Some((10, 20))),
                (vec!["/d/b.mp4".to_owned()], None),
            ]
        );
        // ffmpeg's dash muxer with -single_file: one file's fragments by mediaRange.
        let list = br#"<MPD mediaPresentationDuration="PT4S"><Period><AdaptationSet>
            <Representation id="0" bandwidth="1"><BaseURL>s0.mp4</BaseURL>
              <SegmentList duration="2"><Initialization range="0-920"/>
                <SegmentURL mediaRange="921-70703"/><SegmentURL mediaRange="70704-140296"/><SegmentURL media="x.m4s"/>
              </SegmentList></Representation></AdaptationSet></Period></MPD>"#;
        let reps = representations(list, b"/d/m.mpd", false).unwrap();
        assert_eq!(
            text(reps[0].media.clone()),
            ["/d/s0.mp4", "/d/s0.mp4", "/d/x.m4s"]
        );
        assert_eq!(
            reps[0].ranges,
            [
                Some(SubRange {
                    offset: 921,
                    len: 69783
                }),
                Some(SubRange {
                    offset: 70704,
                    len: 69593
                }),
                None
            ]
        );
        for bad in ["9-1", "a-b", "1", "-1", "1-"] {
            let m = format!(
                r#"<MPD><Period><AdaptationSet><Representation id="0"><BaseURL>v.mp4</BaseURL><SegmentBase indexRange="{bad}"/></Representation></AdaptationSet></Period></MPD>"#
            );
            assert_eq!(
                representations(m.as_bytes(), b"/m.mpd", false),
                Err("bad indexRange"),
                "{bad}"
            );
        }
    }

    #[test]
    fn element_count_is_bounded() {
        let big = format!("<MPD>{}</MPD>", "<x/>".repeat(MAX_ELEMENTS + 1));
        assert_eq!(
            representations(big.as_bytes(), b"/m.mpd", true),
            Err("MPD has too many elements")
        );
    }

    #[test]
    fn refusals() {
        let live = br#"<MPD type="dynamic"><Period/></MPD>"#;
        assert_eq!(objects(live, b"/a.mpd"), Err("live (dynamic) MPD"));
        assert_eq!(objects(b"#EXTM3U\n", b"/a.mpd"), Err("not an MPD"));
        assert!(objects(b"<MPD><Period>", b"/a.mpd").is_err());
        let abs = br#"<MPD><BaseURL>http://elsewhere/</BaseURL></MPD>"#;
        assert!(objects(abs, b"/a.mpd").is_err());
        let sub = br#"<MPD mediaPresentationDuration="PT4S"><Period><AdaptationSet><Representation id="1"><SegmentTemplate duration="2" media="$SubNumber$.m4s"/></Representation></AdaptationSet></Period></MPD>"#;
        assert_eq!(
            objects(sub, b"/a.mpd"),
            Err("unsupported $Identifier$ in a template")
        );
        let nodur = br#"<MPD><Period><AdaptationSet><Representation id="1"><SegmentTemplate duration="2" media="$Number$.m4s"/></Representation></AdaptationSet></Period></MPD>"#;
        assert!(objects(nodur, b"/a.mpd").is_err());
    }

    #[test]
    fn durations_and_templates() {
        assert_eq!(duration_seconds("PT8.0S"), Some(8.0));
        assert_eq!(duration_seconds("PT1H2M3.5S"), Some(3723.5));
        assert_eq!(duration_seconds("P1DT1S"), Some(86401.0));
        assert_eq!(duration_seconds("8S"), None);
        assert_eq!(
            substitute("a$$b-$Number%03d$-$Time$", "r", "5", 7, 90).unwrap(),
            "a$b-007-90"
        );
        assert!(substitute("$Number", "r", "5", 1, 0).is_err());
        assert!(is_mpd_path(b"/x/Manifest.MPD") && !is_mpd_path(b"/x.m3u8"));
    }
}
