//! Freshness (RFC 9111 §4.2): a stored response's freshness lifetime (§4.2.1, with the
//! heuristic of §4.2.2 and an operator's default) and its current age (§4.2.3, with the
//! `Age` field read as §5.1 says).
//!
//! Pure arithmetic on values the caller passes in: times are Unix seconds, or
//! milliseconds where the name says so. Every step saturates; a clock that went
//! backwards counts as 0.

use super::control::{parse_delta_seconds, Control};
use super::status::default_cacheable_status;

/// Heuristic freshness parameters (RFC 9111 §4.2.2): a fraction of the time since
/// `Last-Modified`, capped.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Heuristic {
    /// Fraction of (Date − Last-Modified) used as the lifetime. Default 0.1, the value
    /// §4.2.2 suggests. Negative or NaN acts as 0.
    pub fraction: f64,
    /// Cap on the heuristic lifetime, in seconds. Default 86 400 (one day, the point
    /// past which §4.2.2 says the heuristic is no longer a safe guess without a warning).
    pub max_secs: u64,
}

impl Default for Heuristic {
    fn default() -> Self {
        Heuristic {
            fraction: 0.1,
            max_secs: 86_400,
        }
    }
}

impl Heuristic {
    /// Heuristic lifetime for a response last modified `since_modified_secs` before its
    /// Date: `min(fraction × since_modified_secs, max_secs)`, saturating.
    pub fn lifetime(&self, since_modified_secs: u64) -> u64 {
        // f64 precision loss on huge inputs only shortens a guess that the cap bounds.
        let secs = since_modified_secs as f64 * self.fraction;
        if secs.is_nan() || secs <= 0.0 {
            return 0;
        }
        // `as` saturates float → integer (Rust 1.45+).
        (secs as u64).min(self.max_secs)
    }
}

/// Freshness lifetime in seconds (RFC 9111 §4.2.1) for a shared cache, first match wins:
///
/// 1. `s-maxage`; 2. `max-age` (§5.3: `Expires` is then ignored);
/// 3. `Expires` − `Date` (Date absent: `Expires` − `response_time`), saturating at 0; an
///    `Expires` that does not parse means already expired, 0 (§5.3: "a cache recipient
///    MUST interpret invalid date formats, especially the value "0", as representing a
///    time in the past"). Skipped when a targeted field governs (RFC 9213 §2.2);
/// 4. `operator_ttl`, an operator's explicit choice for responses without freshness
///    information (a video profile's table): it replaces the heuristic, which is only a
///    guess (§4.2.2);
/// 5. with `last_modified`, when the status is cacheable by default or the response is
///    `public` (§4.2.2), `heuristic` applied to (`date` or `response_time`) −
///    `last_modified`;
/// 6. 0: stale at once, reusable only after validation.
///
/// `expires` is the `Expires` field parsed: `None` when absent, `Some(None)` when present
/// but not a date; every time is Unix seconds.
#[allow(clippy::too_many_arguments)] // Each input is one RFC 9111 §4.2.1 term.
pub fn freshness_lifetime(
    control: &Control,
    expires: Option<Option<u64>>,
    date: Option<u64>,
    last_modified: Option<u64>,
    response_time: u64,
    status: u16,
    heuristic: Heuristic,
    operator_ttl: Option<u64>,
) -> u64 {
    let cc = &control.directives;
    if let Some(s) = cc.s_maxage {
        return s;
    }
    if let Some(m) = cc.max_age {
        return m;
    }
    let base = date.unwrap_or(response_time);
    if let Some(exp) = expires.filter(|_| control.uses_expires()) {
        return exp.map_or(0, |exp| exp.saturating_sub(base));
    }
    if let Some(ttl) = operator_ttl {
        return ttl;
    }
    if let Some(lm) = last_modified {
        if default_cacheable_status(status) || cc.public {
            return heuristic.lifetime(base.saturating_sub(lm));
        }
    }
    0
}

/// What a response's `Age` field lines say (RFC 9111 §5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgeField {
    /// No `Age` (or only empty members).
    Absent,
    /// `delta-seconds` (capped at [`crate::cache::DELTA_SECONDS_MAX`]).
    Seconds(u64),
    /// Something else (text, a sign, a fraction): "a cache SHOULD ignore the field"
    /// (RFC 9111 §5.1), so it counts as absent.
    Invalid,
}

impl AgeField {
    /// The `age_value` of RFC 9111 §4.2.3: `None` (0) when absent or invalid (§5.1:
    /// an invalid field is ignored).
    pub fn seconds(self) -> Option<u64> {
        match self {
            AgeField::Seconds(n) => Some(n),
            AgeField::Absent | AgeField::Invalid => None,
        }
    }
}

/// The `Age` of a response's `Age` field lines (RFC 9111 §5.1): "a cache encountering a
/// message with a list-based Age field value SHOULD use the first member of the field
/// value, discarding subsequent ones. If the field value (after discarding additional
/// members, as per above) is invalid (e.g., it contains something other than a
/// non-negative integer), a cache SHOULD ignore the field." So `7200, 0` and the two
/// lines `7200` then `0` are 7200; `abc`, `-5`, `7.0`, `old, 0` are
/// [`AgeField::Invalid`], which adds no age.
pub fn age_field<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> AgeField {
    let mut first = None;
    for line in lines {
        crate::syntax::for_each_member(line, |m| {
            first.get_or_insert(m);
        });
        if first.is_some() {
            break;
        }
    }
    match first {
        None => AgeField::Absent,
        Some(m) => parse_delta_seconds(m).map_or(AgeField::Invalid, AgeField::Seconds),
    }
}

/// Current age in whole seconds, rounded down (RFC 9111 §4.2.3):
///
/// ```text
/// apparent_age          = max(0, response_time - date_value)
/// response_delay        = response_time - request_time
/// corrected_age_value   = age_value + response_delay
/// corrected_initial_age = max(apparent_age, corrected_age_value)
/// current_age           = corrected_initial_age + (now - response_time)
/// ```
///
/// `date` and `age_value` are seconds (the `Date` and `Age` headers; absent counts as no
/// apparent age and 0); the three times are Unix milliseconds. Every step saturates and
/// a clock that went backwards counts as 0, so the result is never negative.
pub fn current_age(
    date: Option<u64>,
    age_value: Option<u64>,
    request_time_ms: u64,
    response_time_ms: u64,
    now_ms: u64,
) -> u64 {
    let apparent_ms = date.map_or(0, |d| {
        response_time_ms.saturating_sub(d.saturating_mul(1000))
    });
    let response_delay_ms = response_time_ms.saturating_sub(request_time_ms);
    let corrected_age_value_ms = age_value
        .unwrap_or(0)
        .saturating_mul(1000)
        .saturating_add(response_delay_ms);
    let corrected_initial_ms = apparent_ms.max(corrected_age_value_ms);
    let resident_ms = now_ms.saturating_sub(response_time_ms);
    corrected_initial_ms.saturating_add(resident_ms) / 1000
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test, with its location.
mod tests {
    use super::*;
    use proptest::prelude::*;

    // ---- Freshness ----

    const H: Heuristic = Heuristic {
        fraction: 0.1,
        max_secs: 86_400,
    };

    const T: u64 = 784_111_777; // Sun, 06 Nov 1994 08:49:37 GMT

    fn cc(v: &str) -> Control {
        Control {
            directives: crate::cache::ResponseCacheControl::parse([v.as_bytes()]),
            source: Some(crate::cache::ControlSource::CacheControl),
        }
    }

    fn life(
        cc_value: &str,
        expires: Option<&str>,
        date: Option<u64>,
        lm: Option<u64>,
        status: u16,
    ) -> u64 {
        freshness_lifetime(
            &cc(cc_value),
            expires.map(|e| crate::date::parse(e.as_bytes())),
            date,
            lm,
            T + 5,
            status,
            H,
            None,
        )
    }

    #[test]
    fn freshness_precedence() {
        let exp = Some("Sun, 06 Nov 1994 09:49:37 GMT");
        assert_eq!(
            life("s-maxage=5, max-age=10", exp, Some(T), Some(0), 200),
            5
        );
        assert_eq!(life("max-age=10", exp, Some(T), Some(0), 200), 10);
        assert_eq!(life("max-age=0", exp, Some(T), None, 200), 0);
        assert_eq!(life("", exp, Some(T), Some(0), 200), 3600);
        assert_eq!(
            life("", exp, None, None, 200),
            3595,
            "Date absent: response_time"
        );
        assert_eq!(
            life("", exp, Some(T + 7200), None, 200),
            0,
            "Expires before Date"
        );
    }

    #[test]
    fn operator_ttl_replaces_the_heuristic_not_explicit_freshness() {
        let f = |v: &str, lm, ttl| freshness_lifetime(&cc(v), None, Some(T), lm, T, 200, H, ttl);
        assert_eq!(f("", Some(T - 1000), Some(77)), 77);
        assert_eq!(f("", None, Some(77)), 77);
        assert_eq!(f("max-age=5", Some(T - 1000), Some(77)), 5);
        assert_eq!(f("", Some(T - 1000), None), 100);
        assert_eq!(
            f("", None, None),
            0,
            "no explicit freshness, no Last-Modified: stale"
        );
    }

    #[test]
    fn targeted_fields_ignore_expires() {
        let exp = b"Sun, 06 Nov 1994 09:49:37 GMT";
        let targeted = Control {
            directives: Default::default(),
            source: Some(crate::cache::ControlSource::Targeted),
        };
        assert_eq!(
            freshness_lifetime(
                &targeted,
                Some(crate::date::parse(exp)),
                Some(T),
                None,
                T,
                200,
                H,
                None
            ),
            0
        );
        assert_eq!(
            freshness_lifetime(
                &cc(""),
                Some(crate::date::parse(exp)),
                Some(T),
                None,
                T,
                200,
                H,
                None
            ),
            3600
        );
    }

    #[test]
    fn age_is_the_first_member_and_invalid_is_said() {
        let age = |lines: &[&str]| age_field(lines.iter().map(|l| l.as_bytes()));
        assert_eq!(age(&["7200, 0"]), AgeField::Seconds(7200));
        assert_eq!(age(&["7200", "0"]), AgeField::Seconds(7200));
        assert_eq!(age(&["0,7200"]), AgeField::Seconds(0));
        assert_eq!(
            age(&[" , 30"]),
            AgeField::Seconds(30),
            "empty members are not members"
        );
        for bad in ["abc", "-7200", "7200.0", "abc, 5", "old, 0"] {
            assert_eq!(age(&[bad]), AgeField::Invalid, "{bad}");
        }
        assert_eq!(age(&[]), AgeField::Absent);
        assert_eq!(
            age(&["99999999999"]),
            AgeField::Seconds(crate::cache::DELTA_SECONDS_MAX)
        );
    }

    #[test]
    fn invalid_expires_is_expired() {
        for e in ["0", "-1", "", "tomorrow", "Sun, 06 Nov 1994 09:49:37 UTC"] {
            assert_eq!(life("", Some(e), Some(T), Some(T - 1000), 200), 0, "{e}");
        }
    }

    #[test]
    fn heuristic_freshness() {
        assert_eq!(life("", None, Some(T), Some(T - 1000), 200), 100);
        assert_eq!(
            life("", None, None, Some(T - 1000), 200),
            100,
            "base is response_time"
        );
        assert_eq!(life("", None, Some(T), Some(0), 200), 86_400, "capped");
        assert_eq!(
            life("", None, Some(T), Some(T + 50), 200),
            0,
            "LM after Date"
        );
        assert_eq!(
            life("", None, Some(T), Some(T - 1000), 302),
            0,
            "not default-cacheable"
        );
        assert_eq!(life("public", None, Some(T), Some(T - 1000), 302), 100);
        assert_eq!(
            life("", None, Some(T), None, 200),
            0,
            "no LM: nothing to guess from"
        );
        assert_eq!(life("no-cache", None, Some(T), None, 200), 0);
    }

    #[test]
    fn heuristic_degenerate_parameters() {
        let h = |fraction, max_secs| Heuristic { fraction, max_secs };
        assert_eq!(h(f64::NAN, 100).lifetime(1000), 0);
        assert_eq!(h(-1.0, 100).lifetime(1000), 0);
        assert_eq!(h(f64::INFINITY, 100).lifetime(1000), 100);
        assert_eq!(h(f64::INFINITY, u64::MAX).lifetime(1), u64::MAX);
        assert_eq!(h(0.5, u64::MAX).lifetime(u64::MAX), u64::MAX / 2 + 1);
        assert_eq!(h(0.1, 100).lifetime(0), 0);
        assert_eq!(Heuristic::default(), H);
    }

    #[test]
    fn current_age_rfc_formula() {
        // Date 10 s before the response arrived, 2 s round trip, Age 3, 5 s resident.
        let resp = (T + 10) * 1000;
        assert_eq!(
            current_age(Some(T), Some(3), resp - 2000, resp, resp + 5000),
            15
        );
        // Age + delay dominates the apparent age.
        assert_eq!(
            current_age(Some(T + 10), Some(30), resp - 2000, resp, resp + 5000),
            37
        );
        // No Date, no Age: only the delay and residency.
        assert_eq!(current_age(None, None, resp - 1500, resp, resp + 1000), 2);
        // Rounds down.
        assert_eq!(current_age(None, None, resp, resp, resp + 999), 0);
    }

    #[test]
    fn current_age_never_negative_or_overflowing() {
        let resp = T * 1000;
        // Date in the future (origin clock ahead): apparent age 0.
        assert_eq!(current_age(Some(T + 3600), None, resp, resp, resp), 0);
        // Clocks going backwards.
        assert_eq!(current_age(None, None, resp + 5000, resp, resp - 5000), 0);
        assert_eq!(
            current_age(Some(u64::MAX), Some(u64::MAX), 0, u64::MAX, u64::MAX),
            u64::MAX / 1000
        );
        assert_eq!(
            current_age(Some(0), Some(u64::MAX), 0, u64::MAX, 0),
            u64::MAX / 1000
        );
    }

    proptest! {
        #[test]
        fn current_age_is_monotonic_in_now(
            date in proptest::option::of(any::<u64>()),
            age in proptest::option::of(any::<u64>()),
            req in any::<u64>(), resp in any::<u64>(), now in any::<u64>(), later in any::<u64>(),
        ) {
            let a = current_age(date, age, req, resp, now);
            let b = current_age(date, age, req, resp, now.saturating_add(later));
            prop_assert!(a <= b);
        }
    }
}
