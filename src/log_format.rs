//! `--log-format json`, etcd's default: each line one JSON object as etcd's zap logger writes
//! it, `{"level":"info","ts":"2026-11-26T18:29:48.236945Z","caller":"server/serve.rs:120",
//! "msg":"...", then the event's fields}`, so that log pipelines which parse etcd's `level`,
//! `ts`, `caller` and `msg` parse mem_etcd's lines too.

use std::fmt::{self, Write as _};
use std::time::SystemTime;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The event formatter (spans are not shown: mem_etcd logs with fields, as etcd does).
pub struct EtcdJson;

impl<S, N> FormatEvent<S, N> for EtcdJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let level = match *meta.level() {
            Level::ERROR => "error",
            Level::WARN => "warn",
            Level::INFO => "info",
            _ => "debug",
        };
        let ts = mem_etcd::utc::timestamp(SystemTime::now());
        write!(w, "{{\"level\":\"{level}\",\"ts\":\"{ts}\"")?;
        if let (Some(file), Some(line)) = (meta.file(), meta.line()) {
            // etcd shows a caller as its package directory and file: the last two parts.
            let short = file.rsplitn(3, '/').take(2).collect::<Vec<_>>();
            let short = short.into_iter().rev().collect::<Vec<_>>().join("/");
            write!(w, ",\"caller\":{}", quoted(&format!("{short}:{line}")))?;
        }
        write!(w, ",\"msg\":{}{}}}", quoted(&fields.msg), fields.rest)?;
        writeln!(w)
    }
}

/// `["a", "b"]`, the Debug form of a list of plain strings, as the JSON array `["a","b"]`
/// (`None` for anything else, such as a string Rust escaped other than JSON does).
fn string_list(debug: &str) -> Option<String> {
    if !debug.starts_with('[') {
        return None;
    }
    match serde_json::from_str::<Vec<String>>(debug) {
        Ok(list) => Some(serde_json::Value::from(list).to_string()),
        Err(_) => None,
    }
}

/// A JSON string.
fn quoted(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// The message, and the other fields as `,"name":value` in the order they were given.
#[derive(Default)]
struct Fields {
    msg: String,
    rest: String,
}

impl Fields {
    /// Adds a field other than the message, `value` already JSON.
    fn push(&mut self, field: &Field, value: &str) {
        let _ = write!(self.rest, ",{}:{value}", quoted(field.name()));
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.msg = text;
        } else if let Some(list) = string_list(&text) {
            // A list of strings (`urls = ?config.listen_client_urls`) is a JSON array, as
            // zap writes etcd's `zap.Strings` fields.
            self.push(field, &list);
        } else {
            self.push(field, &quoted(&text));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.msg = value.to_string();
        } else {
            self.push(field, &quoted(value));
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field, &value.to_string());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push(field, &value.to_string());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.push(field, &serde_json::Value::from(value).to_string());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field, &value.to_string());
    }
}
