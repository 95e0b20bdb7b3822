//! DASH manifests (MPD, ISO/IEC 23009-1) as cache mode's segment prefetch reads them:
//! for each `Representation`, the chain of `BaseURL`s that applies to it and its media
//! segment URIs in playback order ([`parse_mpd`]). The caller resolves them (RFC 3986,
//! `hls::resolve`) against the manifest's own target, base by base.
//!
//! Deliberately narrow, like `hls`: what this module is not sure about gives nothing
//! for that representation (no prefetch), never a guess. Understood: `SegmentList`
//! (`SegmentURL@media`), and `SegmentTemplate` (inherited Period → AdaptationSet →
//! Representation, attribute by attribute) with `$RepresentationID$`, `$Number$`,
//! `$Bandwidth$`, `$Time$`, `$$` and `%0Nd` widths, numbered either by a
//! `SegmentTimeline` or by `@duration` over a known period length. Not read: a
//! `dynamic` (live) manifest without a timeline (which segments exist depends on the
//! wall clock), `SegmentBase` (one segment, read by byte ranges), `xlink`-ed periods,
//! initialization segments (a player fetches those first itself).

use std::borrow::Cow;

use quick_xml::events::Event;
use quick_xml::Reader;

/// Largest manifest body parsed, bytes (as for HLS playlists).
pub const MAX_MPD_BYTES: usize = 1 << 20;

/// Most segments listed per representation: past it the rest are left out (prefetch
/// reads the next few after the one served; a list this long is hours of video).
pub const MAX_SEGMENTS: usize = 20_000;

/// Most XML elements read from one manifest.
const MAX_ELEMENTS: usize = 200_000;

/// The media type of an MPD.
pub const MEDIA_TYPE: &[u8] = b"application/dash+xml";

/// Whether a `Content-Type` value names an MPD (parameters and case ignored).
pub fn is_mpd_type(content_type: &[u8]) -> bool {
    let essence = content_type
        .split(|&b| b == b';')
        .next()
        .unwrap_or(b"")
        .trim_ascii();
    essence.eq_ignore_ascii_case(MEDIA_TYPE)
}

/// Whether a path (no query) ends in `.mpd`, case ignored.
pub fn is_mpd_path(path: &[u8]) -> bool {
    path.len() >= 4 && path[path.len() - 4..].eq_ignore_ascii_case(b".mpd")
}

/// One representation's segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Representation {
    /// `Representation@id`.
    pub id: String,
    /// The `BaseURL`s that apply, outermost (MPD) first; each is resolved against the
    /// one before (the first against the manifest's URL).
    pub bases: Vec<String>,
    /// Media segment URIs in order, relative to the last base.
    pub segments: Vec<String>,
}

/// The representations of an MPD whose segments could be listed. `None` when the body
/// is not a well-formed MPD.
pub fn parse_mpd(body: &[u8]) -> Option<Vec<Representation>> {
    if body.len() > MAX_MPD_BYTES {
        return None;
    }
    let root = tree(std::str::from_utf8(body).ok()?)?;
    if root.name != "MPD" {
        return None;
    }
    let dynamic = root.attr("type") == Some("dynamic");
    let periods: Vec<&Node> = root.children("Period").collect();
    let mpd_duration = root.attr("mediaPresentationDuration").and_then(duration);
    let mut out = Vec::new();
    for period in &periods {
        // A period's length: its own @duration, or the presentation's when it is the
        // only period starting at 0 (the usual VOD case).
        let length = period.attr("duration").and_then(duration).or_else(|| {
            (periods.len() == 1 && period.attr("start").and_then(duration).unwrap_or(0.0) == 0.0)
                .then_some(mpd_duration)
                .flatten()
        });
        for set in period.children("AdaptationSet") {
            for rep in set.children("Representation") {
                let Some(id) = rep.attr("id") else { continue };
                let levels = [*period, set, rep];
                let bases: Vec<String> = [&root, *period, set, rep]
                    .iter()
                    .filter_map(|n| n.child("BaseURL"))
                    .map(|b| b.text.trim().to_owned())
                    .collect();
                let segments =
                    if let Some(list) = levels.iter().rev().find_map(|n| n.child("SegmentList")) {
                        list.children("SegmentURL")
                            .filter_map(|u| u.attr("media"))
                            .take(MAX_SEGMENTS)
                            .map(str::to_owned)
                            .collect::<Vec<_>>()
                    } else {
                        let templates: Vec<&Node> = levels
                            .iter()
                            .filter_map(|n| n.child("SegmentTemplate"))
                            .collect();
                        if templates.is_empty() {
                            continue;
                        }
                        match expand(&templates, id, rep.attr("bandwidth"), length, dynamic) {
                            Some(s) => s,
                            None => continue,
                        }
                    };
                if !segments.is_empty() {
                    out.push(Representation {
                        id: id.to_owned(),
                        bases,
                        segments,
                    });
                }
            }
        }
    }
    Some(out)
}

/// The media URIs of a `SegmentTemplate` (`templates`: outermost first; an inner
/// attribute overrides an outer one).
fn expand(
    templates: &[&Node],
    id: &str,
    bandwidth: Option<&str>,
    length: Option<f64>,
    dynamic: bool,
) -> Option<Vec<String>> {
    let attr = |name: &str| templates.iter().rev().find_map(|t| t.attr(name));
    let media = attr("media")?;
    let start: u64 = attr("startNumber").map_or(Some(1), |v| v.parse().ok())?;
    let timescale: u64 = attr("timescale").map_or(Some(1), |v| v.parse().ok())?;
    if timescale == 0 {
        return None;
    }
    let mut numbered: Vec<(u64, u64)> = Vec::new();
    if let Some(timeline) = templates
        .iter()
        .rev()
        .find_map(|t| t.child("SegmentTimeline"))
    {
        let ss: Vec<&Node> = timeline.children("S").collect();
        let end = length.map(|l| (l * timescale as f64) as u64);
        let mut time = 0u64;
        for (i, s) in ss.iter().enumerate() {
            if let Some(t) = s.attr("t") {
                time = t.parse().ok()?;
            }
            let d: u64 = s.attr("d")?.parse().ok()?;
            if d == 0 {
                return None;
            }
            let r: i64 = s.attr("r").map_or(Some(0), |v| v.parse().ok())?;
            let repeats = if r >= 0 {
                r as u64
            } else {
                // Until the next S's start, or the period's end; unknown: this one.
                let until = ss
                    .get(i + 1)
                    .and_then(|n| n.attr("t"))
                    .and_then(|t| t.parse::<u64>().ok())
                    .or(end);
                until.map_or(0, |u| u.saturating_sub(time).div_ceil(d).saturating_sub(1))
            };
            for _ in 0..=repeats {
                if numbered.len() >= MAX_SEGMENTS {
                    break;
                }
                numbered.push((start.checked_add(numbered.len() as u64)?, time));
                time = time.checked_add(d)?;
            }
        }
    } else {
        // Numbered by @duration: only with a known length and not live.
        let d: u64 = attr("duration")?.parse().ok()?;
        if dynamic || d == 0 {
            return None;
        }
        let count = (length? * timescale as f64 / d as f64).ceil() as u64;
        for n in 0..count.min(MAX_SEGMENTS as u64) {
            numbered.push((start.checked_add(n)?, n.checked_mul(d)?));
        }
    }
    numbered
        .into_iter()
        .map(|(number, time)| substitute(media, id, bandwidth, number, time))
        .collect()
}

/// `template` with its identifiers replaced (ISO/IEC 23009-1 §5.3.9.4.4). An unknown
/// identifier, or `$Bandwidth$` without a bandwidth, gives `None`.
fn substitute(
    template: &str,
    id: &str,
    bandwidth: Option<&str>,
    number: u64,
    time: u64,
) -> Option<String> {
    let mut out = String::with_capacity(template.len() + 16);
    let mut rest = template;
    while let Some(open) = rest.find('$') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after.find('$')?;
        let ident = &after[..close];
        rest = &after[close + 1..];
        if ident.is_empty() {
            out.push('$');
            continue;
        }
        let (name, width) = match ident.split_once('%') {
            Some((n, f)) => {
                let w = f.strip_prefix('0')?.strip_suffix('d')?;
                (n, w.parse::<usize>().ok()?)
            }
            None => (ident, 1),
        };
        let value = match name {
            "RepresentationID" if width == 1 && !ident.contains('%') => {
                out.push_str(id);
                continue;
            }
            "Number" => number,
            "Time" => time,
            "Bandwidth" => bandwidth?.parse().ok()?,
            _ => return None,
        };
        out.push_str(&format!("{value:0width$}"));
    }
    out.push_str(rest);
    Some(out)
}

/// An ISO 8601 duration as DASH writes it (`PT1H2M3.5S`, `P1DT2H`), in seconds. Years
/// and months (of no fixed length) give `None`.
fn duration(v: &str) -> Option<f64> {
    let rest = v.trim().strip_prefix('P')?;
    let (date, time) = rest.split_once('T').unwrap_or((rest, ""));
    let mut secs = 0.0;
    let mut take = |part: &str, units: &[(char, f64)]| -> Option<()> {
        let mut num = String::new();
        for c in part.chars() {
            if c.is_ascii_digit() || c == '.' {
                num.push(c);
            } else {
                let mult = units.iter().find(|(u, _)| *u == c)?.1;
                secs += num.parse::<f64>().ok()? * mult;
                num.clear();
            }
        }
        num.is_empty().then_some(())
    };
    take(date, &[('D', 86_400.0)])?;
    take(time, &[('H', 3600.0), ('M', 60.0), ('S', 1.0)])?;
    Some(secs)
}

/// One XML element: its local name, attributes and text (the elements this module
/// reads are small).
#[derive(Debug, Default)]
struct Node {
    name: String,
    attrs: Vec<(String, String)>,
    text: String,
    kids: Vec<Node>,
}

impl Node {
    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn children<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'s Node> + 's {
        self.kids.iter().filter(move |k| k.name == name)
    }

    fn child(&self, name: &str) -> Option<&Node> {
        self.kids.iter().find(|k| k.name == name)
    }
}

/// The document's root element, or `None` when it is not well formed (or too large).
fn tree(xml: &str) -> Option<Node> {
    let mut reader = Reader::from_str(xml);
    let mut stack: Vec<Node> = Vec::new();
    let mut elements = 0usize;
    let open = |e: &quick_xml::events::BytesStart<'_>| -> Option<Node> {
        let name = std::str::from_utf8(e.local_name().into_inner())
            .ok()?
            .to_owned();
        let mut attrs = Vec::new();
        for a in e.attributes() {
            let a = a.ok()?;
            let key = std::str::from_utf8(a.key.local_name().into_inner())
                .ok()?
                .to_owned();
            attrs.push((
                key,
                a.normalized_value(quick_xml::XmlVersion::default())
                    .ok()?
                    .into_owned(),
            ));
        }
        Some(Node {
            name,
            attrs,
            ..Node::default()
        })
    };
    loop {
        match reader.read_event().ok()? {
            Event::Start(e) => {
                elements += 1;
                if elements > MAX_ELEMENTS {
                    return None;
                }
                stack.push(open(&e)?);
            }
            Event::Empty(e) => {
                elements += 1;
                if elements > MAX_ELEMENTS {
                    return None;
                }
                let node = open(&e)?;
                match stack.last_mut() {
                    Some(parent) => parent.kids.push(node),
                    None => return Some(node),
                }
            }
            Event::End(_) => {
                let node = stack.pop()?;
                match stack.last_mut() {
                    Some(parent) => parent.kids.push(node),
                    None => return Some(node),
                }
            }
            Event::Text(t) => {
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&t.decode().ok()?);
                }
            }
            Event::CData(t) => {
                if let Some(top) = stack.last_mut() {
                    top.text
                        .push_str(std::str::from_utf8(&t.into_inner()).ok()?);
                }
            }
            Event::GeneralRef(r) => {
                let name = r.decode().ok()?;
                let c: Cow<'_, str> = match &*name {
                    "amp" => "&".into(),
                    "lt" => "<".into(),
                    "gt" => ">".into(),
                    "quot" => "\"".into(),
                    "apos" => "'".into(),
                    _ => return None,
                };
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&c);
                }
            }
            Event::Eof => return None,
            Event::Comment(_) | Event::Decl(_) | Event::PI(_) | Event::DocType(_) => {}
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    reason = "tests: a failed step should fail loudly"
)]
mod tests {
    use super::*;

    const VOD: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<MPD xmlns="urn:mpeg:dash:schema:mpd:2011" type="static" mediaPresentationDuration="PT0M21.5S" minBufferTime="PT2S" profiles="urn:mpeg:dash:profile:isoff-live:2011">
  <BaseURL>media/</BaseURL>
  <Period id="p0">
    <AdaptationSet mimeType="video/mp4" segmentAlignment="true">
      <SegmentTemplate timescale="1000" duration="4000" startNumber="1" media="$RepresentationID$/seg-$Number%05d$.m4s" initialization="$RepresentationID$/init.mp4"/>
      <Representation id="v720" bandwidth="3000000" width="1280" height="720"/>
      <Representation id="v360" bandwidth="800000" width="640" height="360">
        <SegmentTemplate media="low/$Bandwidth$-$Number$.m4s"/>
      </Representation>
    </AdaptationSet>
    <AdaptationSet mimeType="audio/mp4">
      <Representation id="a" bandwidth="128000">
        <BaseURL>audio/</BaseURL>
        <SegmentList duration="4">
          <SegmentURL media="a1.m4s"/>
          <SegmentURL media="a2.m4s"/>
        </SegmentList>
      </Representation>
    </AdaptationSet>
  </Period>
</MPD>"#;

    #[test]
    fn a_vod_manifest_lists_every_representation() {
        let reps = parse_mpd(VOD.as_bytes()).unwrap();
        assert_eq!(reps.len(), 3);
        assert_eq!(reps[0].id, "v720");
        assert_eq!(reps[0].bases, ["media/"]);
        // 21.5 s of 4 s segments: 6, numbered from 1.
        assert_eq!(
            reps[0].segments,
            [1, 2, 3, 4, 5, 6].map(|n| format!("v720/seg-{n:05}.m4s"))
        );
        // The representation's own template overrides `media`, inherits the rest.
        assert_eq!(reps[1].segments[0], "low/800000-1.m4s");
        assert_eq!(reps[1].segments.len(), 6);
        assert_eq!(reps[2].bases, ["media/", "audio/"]);
        assert_eq!(reps[2].segments, ["a1.m4s", "a2.m4s"]);
    }

    #[test]
    fn a_live_timeline_numbers_and_times_segments() {
        let mpd = r#"<MPD type="dynamic" availabilityStartTime="2026-01-01T00:00:00Z"><Period start="PT0S">
          <AdaptationSet><SegmentTemplate timescale="90000" startNumber="100" media="v/$Time$_$Number$.m4s">
            <SegmentTimeline><S t="900000" d="180000" r="2"/><S d="90000"/><S t="1800000" d="180000" r="-1"/><S t="2160000" d="180000"/></SegmentTimeline>
          </SegmentTemplate><Representation id="v" bandwidth="1"/></AdaptationSet></Period></MPD>"#;
        let reps = parse_mpd(mpd.as_bytes()).unwrap();
        assert_eq!(
            reps[0].segments,
            [
                "v/900000_100.m4s",
                "v/1080000_101.m4s",
                "v/1260000_102.m4s",
                "v/1440000_103.m4s",
                // r = -1: repeated up to the next S's t.
                "v/1800000_104.m4s",
                "v/1980000_105.m4s",
                "v/2160000_106.m4s",
            ]
        );
    }

    #[test]
    fn what_is_not_understood_gives_nothing_for_that_representation() {
        // Live without a timeline: depends on the wall clock.
        let live = r#"<MPD type="dynamic"><Period><AdaptationSet><SegmentTemplate duration="4" media="$Number$.m4s"/><Representation id="v"/></AdaptationSet></Period></MPD>"#;
        assert_eq!(parse_mpd(live.as_bytes()), Some(vec![]));
        // An unknown identifier.
        let odd = r#"<MPD type="static" mediaPresentationDuration="PT8S"><Period><AdaptationSet><SegmentTemplate duration="4" media="$SubNumber$.m4s"/><Representation id="v"/></AdaptationSet></Period></MPD>"#;
        assert_eq!(parse_mpd(odd.as_bytes()), Some(vec![]));
        // SegmentBase: one segment read by ranges.
        let base = r#"<MPD><Period><AdaptationSet><Representation id="v"><BaseURL>v.mp4</BaseURL><SegmentBase indexRange="0-99"/></Representation></AdaptationSet></Period></MPD>"#;
        assert_eq!(parse_mpd(base.as_bytes()), Some(vec![]));
        // Not an MPD, not well formed.
        assert_eq!(parse_mpd(b"<html></html>"), None);
        assert_eq!(parse_mpd(b"<MPD><Period>"), None);
        assert_eq!(parse_mpd(b"#EXTM3U\n"), None);
    }

    #[test]
    fn substitution_and_durations() {
        assert_eq!(
            substitute("a$$b$Number%03d$", "r", None, 7, 0).unwrap(),
            "a$b007"
        );
        assert_eq!(
            substitute("$RepresentationID$/$Time$", "r1", None, 1, 42).unwrap(),
            "r1/42"
        );
        assert_eq!(substitute("$Bandwidth$", "r", None, 1, 0), None);
        assert_eq!(substitute("$Number", "r", None, 1, 0), None);
        assert_eq!(duration("PT1H2M3.5S"), Some(3723.5));
        assert_eq!(duration("P1DT1S"), Some(86_401.0));
        assert_eq!(duration("P1Y"), None);
        assert_eq!(duration("PT5X"), None);
    }

    #[test]
    fn segment_counts_are_bounded() {
        let mpd = r#"<MPD type="static" mediaPresentationDuration="PT100000H"><Period><AdaptationSet><SegmentTemplate duration="1" media="$Number$.m4s"/><Representation id="v"/></AdaptationSet></Period></MPD>"#;
        assert_eq!(
            parse_mpd(mpd.as_bytes()).unwrap()[0].segments.len(),
            MAX_SEGMENTS
        );
        let big = format!("<MPD>{}</MPD>", "<x/>".repeat(MAX_ELEMENTS + 1));
        assert_eq!(parse_mpd(big.as_bytes()), None);
    }
}
