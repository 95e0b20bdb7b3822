//! Placement: weighted rendezvous hashing (highest random weight) of a cache key over
//! node names. Pure: names, weights and a key in, an order of nodes out.
//!
//! Each node scores `-w / ln(h)` with `h = hash(node, key)` mapped into (0, 1); nodes
//! are ranked by score, highest first. The first is the key's owner; the rest are who
//! to try next, in an order every node computes alike. This is the weighted form of
//! Thaler and Ravishankar's rendezvous hashing (Schindelhauer and Schomaker's
//! "weighted distributed hash tables"): node i owns a key with probability
//! `w_i / Σw`, and adding a node moves only the keys the new node now wins, all to it.
//! Rendezvous rather than a ring of virtual points: no table to build or keep in step
//! across reloads, and exact weights; the cost, O(nodes) per lookup, is a few hundred
//! nanoseconds for tens of nodes, once per miss.
//!
//! Not here: health, load or who this node is (`cluster`).

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// A node as placement sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Weighted<'a> {
    /// Its name (what is hashed).
    pub(crate) name: &'a str,
    /// Its relative share (> 0).
    pub(crate) weight: f64,
}

/// The score of `node` (seeded by its name's hash) for `key`.
fn score(node_seed: u64, weight: f64, key: &[u8]) -> f64 {
    let h = xxh3_64_with_seed(key, node_seed);
    // 53 bits into (0, 1): never 0 (ln would be -inf) and never 1 (ln would be 0).
    let unit = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    -weight / unit.ln()
}

/// Indices of `nodes` ranked for `key`, owner first. Ties (equal scores: a 2^-53
/// event) break by index, so every node still agrees.
pub(crate) fn rank(nodes: &[Weighted<'_>], key: &[u8]) -> Vec<usize> {
    let mut scored: Vec<(f64, usize)> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (score(xxh3_64(n.name.as_bytes()), n.weight, key), i))
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().map(|(_, i)| i).collect()
}

/// [`rank`] for `(name, weight)` pairs: the order the nodes of a cluster would try for
/// `key` (a cache key: `http://host/path`, or a slice's key), owner first. For tools
/// and tests that need to know where a key lives.
pub fn rank_names(nodes: &[(&str, f64)], key: &[u8]) -> Vec<usize> {
    let weighted: Vec<Weighted<'_>> = nodes
        .iter()
        .map(|&(name, weight)| Weighted { name, weight })
        .collect();
    rank(&weighted, key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn nodes<'a>(names: &'a [String], weights: &[f64]) -> Vec<Weighted<'a>> {
        names
            .iter()
            .zip(weights)
            .map(|(name, &weight)| Weighted { name, weight })
            .collect()
    }

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("node-{i}")).collect()
    }

    fn owner(nodes: &[Weighted<'_>], key: &[u8]) -> String {
        nodes[rank(nodes, key)[0]].name.to_string()
    }

    #[test]
    fn ranks_every_node_once() {
        let n = names(5);
        let ns = nodes(&n, &[1.0; 5]);
        let mut r = rank(&ns, b"http://a/x");
        r.sort_unstable();
        assert_eq!(r, vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn order_of_the_list_does_not_matter() {
        let n = names(4);
        let mut rev = n.clone();
        rev.reverse();
        let a = nodes(&n, &[1.0; 4]);
        let b = nodes(&rev, &[1.0; 4]);
        for k in 0..1000 {
            let key = format!("http://h/{k}");
            assert_eq!(owner(&a, key.as_bytes()), owner(&b, key.as_bytes()));
        }
    }

    #[test]
    fn equal_weights_share_evenly_and_weights_are_respected() {
        let n = names(3);
        let keys = 30_000;
        let count = |ws: &[f64]| {
            let ns = nodes(&n, ws);
            let mut c = [0usize; 3];
            for k in 0..keys {
                c[rank(&ns, format!("http://h/seg{k}.ts").as_bytes())[0]] += 1;
            }
            c
        };
        // Binomial(30000, 1/3): sd ≈ 82; 5 % is 1500, more than 15 sd.
        for c in count(&[1.0, 1.0, 1.0]) {
            assert!((c as f64 - 10_000.0).abs() < 500.0, "{c}");
        }
        // Weights 1:2:1 → 1/4, 1/2, 1/4.
        let c = count(&[1.0, 2.0, 1.0]);
        assert!((c[0] as f64 - 7_500.0).abs() < 500.0, "{c:?}");
        assert!((c[1] as f64 - 15_000.0).abs() < 500.0, "{c:?}");
        assert!((c[2] as f64 - 7_500.0).abs() < 500.0, "{c:?}");
    }

    proptest! {
        /// Adding a node moves only keys to the new node, and about 1/n of them.
        #[test]
        fn adding_a_node_moves_about_one_nth_all_to_it(n in 2usize..8, seed in 0u64..1000) {
            let before = names(n);
            let mut after = before.clone();
            after.push(format!("new-{seed}"));
            let b = nodes(&before, &vec![1.0; n]);
            let a = nodes(&after, &vec![1.0; n + 1]);
            let keys = 4000;
            let mut moved = 0;
            for k in 0..keys {
                let key = format!("http://h/{seed}/{k}");
                let (ob, oa) = (owner(&b, key.as_bytes()), owner(&a, key.as_bytes()));
                if ob != oa {
                    prop_assert_eq!(&oa, &format!("new-{seed}"));
                    moved += 1;
                }
            }
            let expected = keys as f64 / (n + 1) as f64;
            prop_assert!((moved as f64 - expected).abs() < expected * 0.25,
                "moved {} expected {}", moved, expected);
        }

        /// Removing a node moves only its keys, each to the node ranked second before.
        #[test]
        fn removing_a_node_hands_its_keys_to_the_runner_up(n in 3usize..8, gone in 0usize..3) {
            let all = names(n);
            let mut rest = all.clone();
            rest.remove(gone);
            let a = nodes(&all, &vec![1.0; n]);
            let r = nodes(&rest, &vec![1.0; n - 1]);
            for k in 0..500 {
                let key = format!("http://h/{k}");
                let ranked = rank(&a, key.as_bytes());
                let now = owner(&r, key.as_bytes());
                if ranked[0] == gone {
                    prop_assert_eq!(now, all[ranked[1]].clone());
                } else {
                    prop_assert_eq!(now, all[ranked[0]].clone());
                }
            }
        }
    }
}
