//! Reading etcd's configuration as etcd reads it: Go's flag syntax, the `ETCD_*` environment
//! variables, and the YAML `--config-file`, with the flags of `compat`'s tables beside
//! [`Flags`]' own.

use std::path::PathBuf;

use super::compat::{ACTED_ON, DEPRECATED, NO_EFFECT, Takes, V2_DEPRECATION_STAGES};
use super::flags::Flags;
use super::runtime::{AutoTls, Config};

/// The flags, as parsed (see [`load`]).
#[derive(Debug)]
pub struct Loaded {
    /// The flags as given (the server derives its [`Config`] from them at start).
    pub flags: Flags,
    /// Flags given that have no effect in mem_etcd (for one line at start).
    pub no_effect: Vec<String>,
    /// etcd's warnings for the deprecated flags given, logged at start as etcd logs them.
    pub deprecated: Vec<&'static str>,
    /// Keys of the configuration file that are no flag (etcd ignores them too).
    pub unknown_keys: Vec<String>,
}

/// Why the flags were refused.
#[derive(Debug)]
pub enum LoadError {
    /// clap's own (unknown flag, bad value, --help): it prints and exits itself.
    Usage(clap::Error),
    /// A value etcd refuses while parsing its flags (feature gates): exit status 2.
    Flag(String),
    /// A configuration etcd refuses after parsing (TLS versions, a logger, the file).
    Invalid(String),
}

/// The command line parser: [`Flags`]' flags and the no-effect ones.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    let mut cmd = Flags::command();
    for (name, takes) in NO_EFFECT {
        let env = format!("ETCD_{}", name.to_uppercase().replace('-', "_"));
        let arg = clap::Arg::new(*name).long(*name).env(env).hide(true);
        cmd = cmd.arg(match takes {
            Takes::Bool => arg.num_args(0..=1).default_missing_value("true").require_equals(true),
            Takes::Value => arg.num_args(1).allow_hyphen_values(true),
        });
    }
    cmd
}

/// Parses etcd's command line (and `ETCD_*` variables) as etcd parses it: Go's flag syntax
/// (`-flag` and `--flag`, `=v` or a separate value), the last of a repeated flag wins, and with
/// `--config-file` (or `ETCD_CONFIG_FILE`) the file alone counts. The first argument is the
/// program's name.
pub fn load<I, T>(args: I) -> Result<Loaded, LoadError>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString>,
{
    use clap::FromArgMatches;
    let args: Vec<std::ffi::OsString> = args.into_iter().map(|a| go_style(a.into())).collect();
    let cmd = command();
    let mut matches = cmd.clone().try_get_matches_from(&args).map_err(LoadError::Usage)?;
    let mut unknown_keys = Vec::new();
    let file = matches.get_one::<PathBuf>("config_file").cloned();
    let file = file.filter(|_| !matches.get_flag("version"));
    if let Some(path) = &file {
        let (file_args, unknown) = file_args(path, &cmd)?;
        unknown_keys = unknown;
        let quiet = cmd.mut_args(|a| a.env(None::<&str>));
        let argv = std::iter::once("mem_etcd".to_string()).chain(file_args);
        matches = quiet.try_get_matches_from(argv).map_err(|e| {
            LoadError::Invalid(format!("{}: {}", path.display(), e.kind()).replace('\n', " "))
        })?;
    }
    let mut config = Flags::from_arg_matches(&matches).map_err(LoadError::Usage)?;
    if file.is_some() {
        config.config_file = file;
    }
    // Whether a flag was given (on the command line, in a variable or in the file); `id` is
    // clap's id: a no-effect flag's name, or a field of [`Flags`].
    let given = |id: &str| {
        matches.ids().any(|i| i.as_str() == id)
            && matches!(
                matches.value_source(id),
                Some(
                    clap::parser::ValueSource::CommandLine | clap::parser::ValueSource::EnvVariable
                )
            )
    };
    let no_effect = NO_EFFECT
        .iter()
        .filter(|(name, _)| given(name) && !ACTED_ON.contains(name))
        .map(|(name, _)| name.to_string())
        .collect();
    let deprecated = DEPRECATED
        .iter()
        .filter(|(name, _)| given(name) || given(&name.replace('-', "_")))
        .map(|(_, warning)| *warning)
        .collect();
    if !config.version {
        config.experimental.feature_gates_state().map_err(LoadError::Flag)?;
        // Values etcd's flag parser refuses although the flag then changes nothing.
        if let Some(v) = matches.get_one::<String>("v2-deprecation")
            && let Some(bad) = v.split(',').find(|s| !V2_DEPRECATION_STAGES.contains(s))
        {
            return Err(LoadError::Flag(format!(
                "invalid value {v:?} for flag -v2-deprecation: invalid value {bad:?}"
            )));
        }
        let nonzero = |id: &str| {
            matches
                .get_one::<String>(id)
                .is_some_and(|v| crate::duration::parse_duration(v).map_or(true, |d| !d.is_zero()))
        };
        if nonzero("warning-unary-request-duration")
            && nonzero("experimental-warning-unary-request-duration")
        {
            return Err(LoadError::Invalid(
                "both --experimental-warning-unary-request-duration and \
                 --warning-unary-request-duration flags are set. Use only \
                 --warning-unary-request-duration"
                    .into(),
            ));
        }
        config.validate().map_err(LoadError::Invalid)?;
        // etcd takes the `--experimental-` form when it is given, the new name otherwise.
        let pick = |name: &str| {
            let old = format!("experimental-{name}");
            let id = if given(&old) { old } else { name.to_string() };
            matches.get_one::<String>(&id).map(|v| (id, v.clone()))
        };
        let flag_error = |id: &str, v: &str| {
            LoadError::Flag(format!("invalid value {v:?} for flag -{id}: parse error"))
        };
        config.table.v2_deprecation_skip_check = matches
            .get_one::<String>("v2-deprecation")
            .is_some_and(|v| v == "write-only-skip-check");
        if let Some((id, v)) = pick("snapshot-catchup-entries") {
            config.table.snapshot_catchup_entries = v.parse().map_err(|_| flag_error(&id, &v))?;
        }
        if let Some((id, v)) = pick("bootstrap-defrag-threshold-megabytes") {
            config.table.bootstrap_defrag_threshold_megabytes =
                v.parse().map_err(|_| flag_error(&id, &v))?;
        }
        // Unlike the others, the new name wins, and 0 is the default (etcd's
        // parseWarningUnaryRequestDuration).
        for id in ["experimental-warning-unary-request-duration", "warning-unary-request-duration"]
        {
            if let Some(v) = matches.get_one::<String>(id) {
                let d = crate::duration::parse_duration(v).map_err(|_| flag_error(id, v))?;
                if !d.is_zero() {
                    config.table.warning_unary_request_duration = d;
                }
            }
        }
    }
    Ok(Loaded { flags: config, no_effect, deprecated, unknown_keys })
}

/// A configuration from `flags` alone, with every other setting at its default (no environment
/// variables, no file): how `etcd gateway` and `etcd grpc-proxy` (`proxy`) build their
/// listeners' TLS from the same flags, read by the same code, as the server's.
pub fn from_flags(flags: &[String]) -> Result<Config, String> {
    use clap::FromArgMatches;
    let cmd = command().mut_args(|a| a.env(None::<&str>));
    let argv = std::iter::once("mem_etcd".to_string()).chain(flags.iter().cloned());
    let matches = cmd.try_get_matches_from(argv).map_err(|e| e.to_string())?;
    let flags = Flags::from_arg_matches(&matches).map_err(|e| e.to_string())?;
    Ok(Config::new(flags, None, AutoTls::default()))
}

/// Go's flag package takes `-flag` as `--flag`; clap knows only the latter.
pub(crate) fn go_style(a: std::ffi::OsString) -> std::ffi::OsString {
    match a.to_str() {
        Some(s)
            if s.starts_with('-')
                && !s.starts_with("--")
                && s[1..].starts_with(|c: char| c.is_ascii_alphabetic())
                && s != "-h" =>
        {
            format!("-{s}").into()
        }
        _ => a,
    }
}

/// The flags an etcd YAML configuration file (`--config-file`) sets, as `--key=value`, and
/// its keys that are no flag. The keys are the flag names, but for the TLS settings, which are
/// under `client-transport-security` and `peer-transport-security`.
fn file_args(
    path: &std::path::Path,
    cmd: &clap::Command,
) -> Result<(Vec<String>, Vec<String>), LoadError> {
    use yaml_rust2::Yaml;
    let fail = |e: String| LoadError::Invalid(format!("--config-file {}: {e}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let docs = yaml_rust2::YamlLoader::load_from_str(&text).map_err(|e| fail(e.to_string()))?;
    let known = |k: &str| cmd.get_arguments().any(|a| a.get_long() == Some(k));
    fn scalar(v: &Yaml) -> Option<String> {
        match v {
            Yaml::String(s) | Yaml::Real(s) => Some(s.clone()),
            Yaml::Integer(i) => Some(i.to_string()),
            Yaml::Boolean(b) => Some(b.to_string()),
            Yaml::Array(a) => Some(a.iter().filter_map(scalar).collect::<Vec<_>>().join(",")),
            _ => None,
        }
    }
    let (mut args, mut unknown) = (Vec::new(), Vec::new());
    let Some(doc) = docs.into_iter().next() else { return Ok((args, unknown)) };
    let Yaml::Hash(map) = doc else {
        return Err(fail("not a map of flag names to values".into()));
    };
    for (k, v) in &map {
        let Some(key) = k.as_str() else { continue };
        let tls = match key {
            "client-transport-security" => Some(""),
            "peer-transport-security" => Some("peer-"),
            _ => None,
        };
        if let Some(prefix) = tls {
            let Yaml::Hash(inner) = v else {
                if v.is_null() {
                    continue;
                }
                return Err(fail(format!("invalid {key}")));
            };
            for (k, v) in inner {
                let Some(k) = k.as_str() else { continue };
                let flag = match (prefix, k) {
                    ("", "allowed-hostname") => "client-cert-allowed-hostname".to_string(),
                    ("peer-", "allowed-cn" | "allowed-hostname") => {
                        format!("peer-cert-{k}")
                    }
                    (p, k) => format!("{p}{k}"),
                };
                match scalar(v) {
                    Some(v) if known(&flag) => args.push(format!("--{flag}={v}")),
                    _ => unknown.push(format!("{key}.{k}")),
                }
            }
            continue;
        }
        let flag = match key {
            // etcd reads this misspelling too.
            "experimental-snapshot-catch-up-entries" => "experimental-snapshot-catchup-entries",
            k => k,
        };
        match scalar(v) {
            Some(v) if known(flag) && flag != "config-file" => args.push(format!("--{flag}={v}")),
            None if v.is_null() => {}
            _ => unknown.push(key.to_string()),
        }
    }
    Ok((args, unknown))
}

impl Config {
    /// The configuration `args` (the program's name first) give, as clap parses them, with no
    /// environment rewrite or auto-TLS: for tests and benchmarks, as `Parser::parse_from` was
    /// when the flags were the configuration. Exits on a bad flag, as clap does.
    pub fn parse_from<I, T>(args: I) -> Self
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::Parser;
        Config::new(Flags::parse_from(args), None, AutoTls::default())
    }
}
