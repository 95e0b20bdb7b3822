//! The server's modules form layers: no module reaches, through `crate::` or `super::`
//! paths, one that reaches back to it (ARCHITECTURE.md, "Inside `linerate-server`").
//! A cycle of files that all need each other is how the cache wing once grew into a
//! 16-file knot; this keeps it from coming back, for this crate, `linerate-http` and
//! `linerate-cache`.
//!
//! Granularity is the file. A module and its own submodules may use each other (a
//! `mod.rs` re-exporting its children is not a cycle); comment lines are skipped.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path (`proxy::fill`) → source text, for every `.rs` file under `src`.
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            out.insert(parts.join("::"), std::fs::read_to_string(&path).unwrap());
        }
    }
    out
}

/// The paths after `prefix` in `text` (`crate::a::b` → `a::b`), code lines only.
fn paths_after<'t>(text: &'t str, prefix: &str) -> Vec<&'t str> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .flat_map(|l| {
            l.match_indices(prefix)
                .map(move |(i, _)| &l[i + prefix.len()..])
        })
        .filter(|rest| {
            // `crate::` inside a longer identifier (`linerate_crate::`) is not ours.
            rest.starts_with(|c: char| c.is_ascii_lowercase() || c == '{')
        })
        .map(|rest| {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            rest[..end].trim_end_matches(':')
        })
        .collect()
}

fn related(a: &str, b: &str) -> bool {
    a.is_empty()
        || b.is_empty()
        || a.starts_with(&format!("{b}::"))
        || b.starts_with(&format!("{a}::"))
}

/// Module → the modules it uses (longest existing module prefix of each path).
fn graph(mods: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let resolve = |path: &str| -> Option<String> {
        let segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
        (1..=segs.len())
            .rev()
            .map(|k| segs[..k].join("::"))
            .find(|c| mods.contains_key(c))
    };
    let mut g = BTreeMap::new();
    for (m, text) in mods {
        let mut uses = BTreeSet::new();
        for p in paths_after(text, "crate::") {
            uses.extend(resolve(p));
        }
        let parent = m.rsplit_once("::").map_or("", |(p, _)| p);
        for p in paths_after(text, "super::") {
            let full = if parent.is_empty() {
                p.to_owned()
            } else {
                format!("{parent}::{p}")
            };
            uses.extend(resolve(&full));
        }
        uses.retain(|u| u != m && !related(m, u));
        g.insert(m.clone(), uses);
    }
    g
}

/// Strongly connected components of more than one module (Tarjan).
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'g> {
        g: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on: BTreeSet<&'g str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'g>(t: &mut T<'g>, v: &'g str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        for w in &t.g[v] {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = t.stack.pop().unwrap();
                t.on.remove(w);
                comp.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn check(src: &Path) {
    let mods = modules(src);
    assert!(mods.len() > 10, "read the crate's modules from {src:?}");
    let g = graph(&mods);
    let found = cycles(&g);
    assert!(
        found.is_empty(),
        "modules of {src:?} that use each other: {found:?}"
    );
}

#[test]
fn server_modules_form_layers() {
    check(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
}

#[test]
fn http_modules_form_layers() {
    check(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../linerate-http/src"));
}

/// The store: its shared state (`state`) at the bottom, `store` (the `Store` facade)
/// on top of the modules that work on that state.
#[test]
fn cache_modules_form_layers() {
    check(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../linerate-cache/src"));
}

/// The check itself finds a cycle: two modules that use each other, and three in a ring.
#[test]
fn a_cycle_is_found() {
    let mods: BTreeMap<String, String> = [
        ("a", "use crate::b::X;"),
        ("b", "fn f() { crate::a::g() }"),
        ("p::x", "use super::y::Z;"),
        ("p::y", "use crate::q;"),
        ("q", "use crate::p::x::W;"),
        ("p", "pub use x::W; // crate::q"),
        ("lone", "use crate::a;"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let found = cycles(&graph(&mods));
    assert_eq!(
        found,
        vec![
            vec!["a".to_owned(), "b".to_owned()],
            vec!["p::x".to_owned(), "p::y".to_owned(), "q".to_owned()]
        ]
    );
}
