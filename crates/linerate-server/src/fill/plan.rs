//! A job's plan: which request fetches each URL, where a playlist's segments are, and
//! when a window is open. Pure functions over the routes; the I/O is `run`'s.

use linerate_http::cache::key::{self, Scheme};
use linerate_http::{hls, path};

use super::Item;
use crate::proxy::ProxyShared;

/// The request for `url` (an absolute `http://` URL, or a path requested with `host`),
/// when a cache route serves it.
pub(super) fn item(px: &ProxyShared, host: Option<&str>, url: &str) -> Result<Item, String> {
    let (host, target) = if url.starts_with('/') {
        let Some(h) = host else {
            return Err(format!("{url:?} is a path: give the job a \"host\""));
        };
        (h.to_owned(), url.to_owned())
    } else {
        let Some(u) = key::split_url(url.as_bytes()) else {
            return Err(format!("{url:?} is not an http:// URL or a path"));
        };
        if u.scheme != Scheme::Http {
            return Err(format!(
                "{url:?}: fill jobs request over the plain listener; give http:// URLs"
            ));
        }
        let authority = String::from_utf8_lossy(u.authority).into_owned();
        let mut target = String::from_utf8_lossy(u.path).into_owned();
        // `query` keeps its `?`.
        target.push_str(&String::from_utf8_lossy(u.query));
        (authority, target)
    };
    if target.len() > 8192 || target.bytes().any(|b| !(0x21..=0x7e).contains(&b)) {
        return Err(format!("{url:?}: not a valid request target"));
    }
    if host.is_empty()
        || host
            .bytes()
            .any(|b| !(0x21..=0x7e).contains(&b) || b == b'/')
    {
        return Err(format!("{url:?}: not a valid host"));
    }
    // Normalised as the server will normalise the request this job sends (and sent in
    // that form): `/a/./b` is `/a/b`'s object, so the key checked and pinned below is the
    // one the request stores, and a `..` that climbs out of a route is refused here
    // with its reason rather than fetched from another route.
    let normal = path::normalize_proxy_target(target.as_bytes())
        .map_err(|e| format!("{url:?}: refused request target ({})", e.as_str()))?;
    let keyed_host = key::host_of(host.as_bytes());
    let Some((key, route)) = px.key_for(Scheme::Http, &keyed_host, &normal) else {
        let shown = String::from_utf8_lossy(normal.as_bytes());
        return Err(format!("{url:?} ({shown}) is on no cache route"));
    };
    let target = String::from_utf8_lossy(normal.as_bytes()).into_owned();
    // On a sliced route an object larger than a slice is stored as slices, a smaller
    // one whole: either means held.
    let _ = (key, route);
    Ok(Item {
        host: host.into(),
        target: target.into(),
        tries: 0,
        playlist: false,
        replay: false,
    })
}

/// The key of a planned request (its target is normalised), and whether its route
/// slices; `None` when no route serves it (the routes changed).
pub(super) fn key_of(px: &ProxyShared, host: &str, target: &str) -> Option<(Vec<u8>, bool)> {
    let normal = path::normalize_proxy_target(target.as_bytes()).ok()?;
    let keyed_host = key::host_of(host.as_bytes());
    let (key, route) = px.key_for(Scheme::Http, &keyed_host, &normal)?;
    Some((key, px.routes[route].opts.slice_bytes > 0))
}

/// The objects a manifest names, as references relative to `parent` (the item it was
/// fetched as): an MPD's every segment (`linerate_http::dash`), an HLS playlist's URIs
/// ([`playlist_uris`]). `Err`: why it cannot be read (a failure reason).
pub(super) fn listing(body: &[u8], parent: &Item) -> Result<Vec<Vec<u8>>, String> {
    if linerate_http::dash::looks_like_xml(body) {
        return linerate_http::dash::objects(body, parent.target.as_bytes())
            .map_err(|e| format!("MPD: {e}"));
    }
    playlist_uris(body)
        .map(|(_, uris)| uris)
        .ok_or_else(|| "not a playlist or MPD".to_owned())
}

/// The URIs a playlist lists: for a master playlist its renditions' playlists (variant
/// streams and `EXT-X-MEDIA` `URI`s), for a media playlist its segments. `None` when
/// the body is not an HLS playlist.
pub(super) fn playlist_uris(body: &[u8]) -> Option<(bool, Vec<Vec<u8>>)> {
    if body.len() > hls::MAX_PLAYLIST_BYTES {
        return None;
    }
    let lines = || {
        body.split(|&b| b == b'\n')
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l).trim_ascii())
    };
    if lines().next()? != b"#EXTM3U" {
        return None;
    }
    let master = lines().any(|l| l.starts_with(b"#EXT-X-STREAM-INF"));
    if !master {
        let media = hls::parse_media(body)?;
        // A byte-range playlist names its one file once per segment: one object.
        let mut seen = std::collections::HashSet::new();
        let uris = media
            .segments
            .iter()
            .filter(|s| seen.insert(**s))
            .map(|s| s.to_vec())
            .collect();
        return Some((false, uris));
    }
    let mut out = Vec::new();
    for l in lines() {
        if l.is_empty() {
            continue;
        }
        if l.starts_with(b"#EXT-X-MEDIA:") || l.starts_with(b"#EXT-X-I-FRAME-STREAM-INF:") {
            if let Some(uri) = quoted_uri(l) {
                out.push(uri.to_vec());
            }
        } else if !l.starts_with(b"#") {
            out.push(l.to_vec());
        }
    }
    Some((true, out))
}

/// The `URI="..."` attribute of a tag line.
fn quoted_uri(line: &[u8]) -> Option<&[u8]> {
    let at = line.windows(5).position(|w| w == b"URI=\"")?;
    let rest = &line[at + 5..];
    let end = rest.iter().position(|&b| b == b'"')?;
    Some(&rest[..end])
}

/// The item a playlist line names, relative to the playlist `parent` (or absolute).
pub(super) fn child(px: &ProxyShared, parent: &Item, uri: &[u8]) -> Result<Item, String> {
    let text = String::from_utf8_lossy(uri);
    if text.starts_with("http://") || text.starts_with("https://") {
        return item(px, None, &text);
    }
    let Some(target) = hls::resolve(parent.target.as_bytes(), uri) else {
        return Err(format!("{text:?}: not a URI fill can follow"));
    };
    let target = String::from_utf8_lossy(&target).into_owned();
    item(px, Some(&parent.host), &target)
}

/// A daily window in local time, `[start, end)` in minutes since midnight; `end <
/// start` wraps midnight; `start == end` is the whole day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    start: u32,
    end: u32,
}

impl Window {
    pub(crate) fn parse(start: &str, end: &str) -> Result<Window, String> {
        Ok(Window {
            start: hhmm(start)?,
            end: hhmm(end)?,
        })
    }

    /// Whether `minute` (since local midnight) is inside.
    pub(crate) fn contains(self, minute: u32) -> bool {
        match self.start.cmp(&self.end) {
            std::cmp::Ordering::Equal => true,
            std::cmp::Ordering::Less => (self.start..self.end).contains(&minute),
            std::cmp::Ordering::Greater => minute >= self.start || minute < self.end,
        }
    }

    /// Whether the window is open now, in the process's local time zone (`TZ`, else
    /// `/etc/localtime`). A clock the C library cannot convert counts as closed.
    pub(crate) fn open_now(self) -> bool {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        linerate_sys::localtime::minute_of_day(secs).is_some_and(|m| self.contains(m))
    }
}

fn hhmm(s: &str) -> Result<u32, String> {
    let bad = || format!("window time {s:?} is not HH:MM (00:00 to 23:59)");
    let (h, m) = s.split_once(':').ok_or_else(bad)?;
    if h.len() != 2 || m.len() != 2 {
        return Err(bad());
    }
    let h: u32 = h.parse().map_err(|_| bad())?;
    let m: u32 = m.parse().map_err(|_| bad())?;
    if h > 23 || m > 59 {
        return Err(bad());
    }
    Ok(h * 60 + m)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn windows_wrap_midnight() {
        let w = Window::parse("22:00", "06:00").unwrap();
        assert!(w.contains(23 * 60));
        assert!(w.contains(0));
        assert!(w.contains(5 * 60 + 59));
        assert!(!w.contains(6 * 60));
        assert!(!w.contains(12 * 60));
        let d = Window::parse("09:30", "10:00").unwrap();
        assert!(d.contains(9 * 60 + 30) && !d.contains(10 * 60) && !d.contains(9 * 60));
        assert!(Window::parse("00:00", "00:00").unwrap().contains(777));
        for bad in ["24:00", "9:00", "09:60", "0900", "aa:bb", ""] {
            assert!(Window::parse(bad, "01:00").is_err(), "{bad}");
        }
    }

    #[test]
    fn master_and_media_playlists() {
        let master = b"#EXTM3U\n#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"a\",NAME=\"en\",URI=\"audio/en.m3u8\"\n#EXT-X-STREAM-INF:BANDWIDTH=1000\nlow/index.m3u8\n#EXT-X-STREAM-INF:BANDWIDTH=2000\r\nhigh/index.m3u8\r\n";
        let (is_master, uris) = playlist_uris(master).unwrap();
        assert!(is_master);
        assert_eq!(
            uris,
            vec![
                b"audio/en.m3u8".to_vec(),
                b"low/index.m3u8".to_vec(),
                b"high/index.m3u8".to_vec()
            ]
        );
        let media = b"#EXTM3U\n#EXT-X-TARGETDURATION:4\n#EXTINF:4,\ns0.ts\n#EXTINF:4,\ns1.ts\n#EXT-X-ENDLIST\n";
        let (is_master, uris) = playlist_uris(media).unwrap();
        assert!(!is_master);
        assert_eq!(uris, vec![b"s0.ts".to_vec(), b"s1.ts".to_vec()]);
        // A byte-range playlist: its one file, once (it was refused before).
        let ranged = include_bytes!("../../../../sample/hls-byterange/index.m3u8");
        assert_eq!(
            playlist_uris(ranged),
            Some((false, vec![b"media.ts".to_vec()]))
        );
        assert!(playlist_uris(b"<html>").is_none());
    }
}
