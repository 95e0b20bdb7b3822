//! `[fill]`: its tests. The section is [`linerate_server::fillopts::FillOptions`]
//! itself, which reads and checks its keys; the file's parser adds the line.

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
            ("[fill]\nmax_urls_per_job = 0\n", "between 1 and 1000000"),
            (
                "[fill]\nmax_urls_per_job = 1000001\n",
                "between 1 and 1000000",
            ),
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
