//! How the commands reach a store, with etcdctl's flags: `--cacert`, `--cert`, `--key` for
//! `https://` URLs, and `--user`/`--password` where auth is enabled (a token from
//! Authenticate, carried in every call's metadata as etcd's clients carry it). A store may be
//! given as several client URLs, comma-separated (etcdctl's `--endpoints`): a cluster's
//! members, one used at a time and the next when it stops answering.

use std::time::Duration;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::{Interceptor, interceptor::InterceptedService};
use tonic::transport::{Channel, Endpoint};

use crate::proto::etcdserverpb as pb;

/// etcdctl's flags for reaching a store, shared by the commands.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Access {
    /// For `https://` URLs: the CA bundle to verify the servers with.
    #[arg(long)]
    pub cacert: Option<String>,
    /// For `https://` URLs: the client certificate to present.
    #[arg(long)]
    pub cert: Option<String>,
    /// For `https://` URLs: its key.
    #[arg(long)]
    pub key: Option<String>,
    /// With auth enabled: the user to log in as, `name` or `name:password` (etcdctl's
    /// `--user`). HashKV, Compact and the lease list want root.
    #[arg(long)]
    pub user: Option<String>,
    /// The password, when --user does not carry it.
    #[arg(long)]
    pub password: Option<String>,
}

/// A connection to one store, logged in if a user was given.
pub type Conn = InterceptedService<Channel, Token>;

/// Puts the auth token in every call's metadata, where etcd's servers read it.
#[derive(Clone, Debug)]
pub struct Token(Option<MetadataValue<Ascii>>);

impl Interceptor for Token {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(t) = &self.0 {
            req.metadata_mut().insert("token", t.clone());
        }
        Ok(req)
    }
}

impl Access {
    /// Connects to the store at `url` (named `who` in errors) and logs in.
    pub async fn connect(&self, url: &str, who: &str) -> Result<Conn, String> {
        let tls = crate::tls::client_from_files(
            self.cacert.as_deref(),
            self.cert.as_deref(),
            self.key.as_deref(),
        )?;
        let endpoint = Endpoint::from_shared(url.to_string()).map_err(|e| format!("{url}: {e}"))?;
        // A member that froze (not one that closed its connections) must show as an error,
        // not as a call that never ends or a watch that is merely quiet.
        let endpoint = endpoint
            .connect_timeout(CALL_TIMEOUT)
            .http2_keep_alive_interval(CALL_TIMEOUT)
            .keep_alive_timeout(CALL_TIMEOUT)
            .keep_alive_while_idle(true);
        let ch = match (url.starts_with("https://"), tls) {
            (true, Some(tls)) => tls.connect_lazy(endpoint),
            (true, None) => {
                return Err(format!("{url}: https needs --cert and --key (and --cacert)"));
            }
            (false, _) => endpoint.connect_lazy(),
        };
        let token = match self.credentials()? {
            None => None,
            Some((name, password)) => {
                let mut auth = pb::auth_client::AuthClient::new(ch.clone());
                let req = pb::AuthenticateRequest { name: name.clone(), password };
                let r = auth.authenticate(req).await;
                let r = r.map_err(|e| format!("{who}: authenticate as {name}: {}", e.message()))?;
                let token = r.into_inner().token;
                Some(token.parse().map_err(|_| format!("{who}: the auth token is not ASCII"))?)
            }
        };
        Ok(InterceptedService::new(ch, Token(token)))
    }

    /// `--user` and `--password` as etcdctl reads them: (name, password).
    fn credentials(&self) -> Result<Option<(String, String)>, String> {
        let Some(user) = &self.user else { return Ok(None) };
        match (user.split_once(':'), &self.password) {
            (Some((name, pw)), None) => Ok(Some((name.to_string(), pw.to_string()))),
            (None, Some(pw)) => Ok(Some((user.clone(), pw.clone()))),
            (Some(_), Some(_)) => {
                Err("--user name:password and --password: give the password once".into())
            }
            (None, None) => {
                Err(format!("--user {user}: give its password (--password, or name:password)"))
            }
        }
    }
}

/// How long a member may take to connect, or to answer a keep-alive ping, before it counts as
/// down. etcd's members answer in milliseconds; a leader election takes about a second.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// A store reached at one of its client URLs, logged in there.
#[derive(Debug)]
pub struct Store {
    /// The connection to the member in use.
    pub conn: Conn,
    /// Every client URL given, and the one in use: `fail_over` moves to the next.
    urls: Vec<String>,
    at: usize,
    access: Access,
    /// How errors name the store ("source", "copy").
    who: &'static str,
}

impl Store {
    /// Connects to the first of `urls` (comma-separated) that takes the connection.
    pub async fn connect(access: &Access, urls: &str, who: &'static str) -> Result<Store, String> {
        let urls: Vec<String> =
            urls.split(',').map(str::trim).filter(|u| !u.is_empty()).map(String::from).collect();
        if urls.is_empty() {
            return Err(format!("{who}: no URL given"));
        }
        let (conn, at) = first_taken(access, &urls, 0, who).await?;
        Ok(Store { conn, urls, at, access: access.clone(), who })
    }

    /// The URL in use.
    pub fn url(&self) -> &str {
        &self.urls[self.at]
    }

    /// Moves to the next URL that takes the connection (the one in use stopped answering);
    /// with one URL, connects to it again.
    pub async fn fail_over(&mut self) -> Result<(), String> {
        let next = (self.at + 1) % self.urls.len();
        (self.conn, self.at) = first_taken(&self.access, &self.urls, next, self.who).await?;
        Ok(())
    }
}

/// The first of `urls`, from `start` round, that takes the connection (and the login).
async fn first_taken(
    access: &Access,
    urls: &[String],
    start: usize,
    who: &str,
) -> Result<(Conn, usize), String> {
    let mut last = String::new();
    for i in (0..urls.len()).map(|k| (start + k) % urls.len()) {
        match access.connect(&urls[i], who).await {
            Ok(conn) => return Ok((conn, i)),
            Err(e) => last = e,
        }
    }
    Err(last)
}
