//! `[tls]`: its tests. The section is [`linerate_server::TlsOptions`] itself, which
//! reads and checks its keys (the file's parser adds the line and runs
//! [`linerate_server::TlsOptions::check`]). Certificate files are read by the server at
//! start-up and on reload (and by `check-config`), not here.

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use crate::config::Config;

    #[test]
    fn tls_section_parses_and_defaults() {
        let c = Config::parse(
            "[tls]\nlisten = [\"127.0.0.1:8443\"]\n[[tls.certificates]]\nchain = \"a.pem\"\nkey = \"a.key\"\nnames = [\"Example.com\", \"*.example.com\"]\n",
        )
        .unwrap();
        let o = c.to_options().tls.unwrap();
        assert_eq!(
            o.certificates[0].names,
            vec!["example.com", "*.example.com"]
        );
        assert_eq!(o.unknown_sni, linerate_server::UnknownSni::Default);
        assert_eq!(o.ktls, linerate_server::KtlsMode::Auto);
        assert!(Config::parse("").unwrap().to_options().tls.is_none());
    }

    #[test]
    fn bad_tls_values_name_the_line() {
        for (text, line, what) in [
            ("[tls]\nunknown_sni = \"maybe\"\n", "line 2", "refuse"),
            ("[tls]\nhandshake_timeout_ms = 0\n", "line 2", "between 1"),
            (
                "[tls]\n[[tls.certificates]]\nchain = \"a\"\nkey = \"b\"\nnames = [\"a b\"]\n",
                "line 5",
                "DNS name",
            ),
            (
                "[tls]\n[[tls.certificates]]\nchain = \"a\"\nkey = \"b\"\nkye = 1\n",
                "line 5",
                "kye",
            ),
        ] {
            let e = Config::parse(text).unwrap_err().to_string();
            assert!(e.contains(line) && e.contains(what), "{text:?} -> {e}");
        }
        let e = Config::parse("[tls]\nlisten = [\"127.0.0.1:1\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("tls.certificates"), "{e}");
    }
}
