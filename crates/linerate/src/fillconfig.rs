//! `[fill]`: how pre-positioning (fill) jobs run (reference: docs/config.md). Same rules
//! as the rest of the file: unknown keys and bad values are errors naming the key and
//! line; defaults come from `linerate_server::fillopts`.

use std::path::PathBuf;

use linerate_server::fillopts::{self, FillOptions};
use serde::{Deserialize, Deserializer, Serialize};

/// `[fill]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FillSection {
    /// Objects fetched at once, all jobs together. Default 4.
    #[serde(deserialize_with = "positive")]
    pub concurrency: u64,
    /// Bytes per second, all jobs together; 0 = no cap. Default 0.
    pub rate_bytes_per_s: u64,
    /// Client fills in flight above which fill jobs start nothing new. Default 8.
    pub yield_above: u64,
    /// Further tries of an object that failed. Default 2.
    pub retries: u32,
    /// Share of `"ready": true` jobs' objects held before `/ready` is 200. Default 0.
    #[serde(deserialize_with = "share")]
    pub ready_coverage: f64,
    /// Where jobs are kept across restarts. Default: `fill-jobs.json` in the first
    /// disk's directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_file: Option<PathBuf>,
}

impl Default for FillSection {
    fn default() -> Self {
        let o = FillOptions::default();
        FillSection {
            concurrency: fillopts::DEFAULT_CONCURRENCY as u64,
            rate_bytes_per_s: o.rate_bytes_per_s,
            yield_above: fillopts::DEFAULT_YIELD_ABOVE as u64,
            retries: fillopts::DEFAULT_RETRIES,
            ready_coverage: o.ready_coverage,
            state_file: None,
        }
    }
}

impl FillSection {
    /// Typed options.
    pub fn to_options(&self) -> FillOptions {
        FillOptions {
            concurrency: usize::try_from(self.concurrency).unwrap_or(usize::MAX),
            rate_bytes_per_s: self.rate_bytes_per_s,
            yield_above: usize::try_from(self.yield_above).unwrap_or(usize::MAX),
            retries: self.retries,
            ready_coverage: self.ready_coverage,
            state_file: self.state_file.clone(),
        }
    }
}

fn positive<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let n = u64::deserialize(d)?;
    if n == 0 {
        return Err(serde::de::Error::custom("must be greater than 0"));
    }
    Ok(n)
}

fn share<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v = f64::deserialize(d)?;
    if !(0.0..=1.0).contains(&v) {
        return Err(serde::de::Error::custom("must be between 0.0 and 1.0"));
    }
    Ok(v)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use crate::config::Config;

    #[test]
    fn fill_section_defaults_and_values() {
        let o = Config::parse("").unwrap().to_options().fill;
        assert_eq!(o, linerate_server::fillopts::FillOptions::default());
        let o = Config::parse(
            "[fill]\nconcurrency = 16\nrate_bytes_per_s = 1000\nyield_above = 0\nretries = 0\nready_coverage = 0.95\nstate_file = \"/var/lib/lr/jobs.json\"\n",
        )
        .unwrap()
        .to_options()
        .fill;
        assert_eq!(o.concurrency, 16);
        assert_eq!(o.rate_bytes_per_s, 1000);
        assert_eq!(o.yield_above, 0);
        assert_eq!(o.retries, 0);
        assert_eq!(o.ready_coverage, 0.95);
        assert_eq!(
            o.state_file.as_deref(),
            Some(std::path::Path::new("/var/lib/lr/jobs.json"))
        );
    }

    #[test]
    fn bad_fill_values_name_key_and_line() {
        for (text, what) in [
            ("[fill]\nconcurrency = 0\n", "greater than 0"),
            ("[fill]\nready_coverage = 1.5\n", "between 0.0 and 1.0"),
            ("[fill]\nready_coverage = -0.1\n", "between 0.0 and 1.0"),
            ("[fill]\nrate = 5\n", "rate"),
            ("[fill]\nretries = -1\n", ""),
        ] {
            let e = Config::parse(text).unwrap_err().to_string();
            assert!(e.contains("line 2") && e.contains(what), "{text}: {e}");
        }
    }
}
