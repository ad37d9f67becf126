//! The key each request carries: none, a fixed key (`target.api_key_env`), or a token that a
//! command prints (`target.api_key_command`) and that changes while the run goes on.
//!
//! Requests read the current token without a lock: a fixed key is read as it is, and a command's
//! token through one atomic load of its generation, compared with the copy each thread keeps
//! (the shared cell's lock is taken only by the first request on a thread after a refresh). They
//! never wait for the command: it runs before the run (`Credentials::obtain`; a failure
//! refuses the run, exit code 2), in a background task every `api_key_refresh`
//! (`Credentials::refresh_every`; a failure is a warning with its time, and the old token stays
//! in use), and once when a request is refused with 401 (`Credentials::after_401`, coalesced:
//! the requests refused together run the command once, and each is sent again once with the
//! new token). Every token obtained is learned by the run's secrets (`KeyCommand::tokens`),
//! and only the program's name, its exit status and its first line of standard error (scrubbed)
//! are ever shown.

use std::cell::RefCell;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use http::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
use serde::Serialize;
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

use crate::contract::{ErrorKind, Stamp};
use crate::plan::scenario::ScenarioError;
use crate::plan::scenario::key_command::{KEY_COMMAND_TIMEOUT, KeyCommand};
use crate::redact::Secrets;
use crate::request::record::Outcome;

/// A token is a line; a command printing more than this printed something else.
const OUTPUT_LIMIT: usize = 64 * 1024;

/// The key sent with every request, and the API's other header names that carry it too
/// (`x-api-key` for the Messages API). Cloning shares the cell.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    source: Option<Arc<Source>>,
    also_as: Vec<HeaderName>,
}

/// One key's headers, and which of the command's tokens it is (0: a fixed key).
#[derive(Debug, Clone)]
struct Token {
    generation: u64,
    bearer: HeaderValue,
    raw: HeaderValue,
}

#[derive(Debug)]
struct Source {
    /// Unique in the process, for the per-thread copies (`SEEN`).
    id: u64,
    current: Cell,
    /// The generation of the token in `current`, stored after it is in place.
    generation: AtomicU64,
    /// Present for a token a command prints.
    command: Option<KeyCommand>,
    /// Held while the command runs, so the requests refused together run it once; holds the
    /// generation whose 401 refresh failed (not tried again for the same token).
    refreshing: tokio::sync::Mutex<Option<u64>>,
    counts: Counts,
    /// Refresh failures not yet in an artifact.
    failures: Mutex<Vec<RefreshFailure>>,
}

/// Where the key is kept: a fixed key needs no lock; a command's token is copied per thread.
#[derive(Debug)]
enum Cell {
    Fixed(Token),
    Rotating(RwLock<Token>),
}

#[derive(Debug, Default)]
struct Counts {
    scheduled: AtomicU64,
    after_401: AtomicU64,
    failed: AtomicU64,
}

/// How often the key command ran during the run, for the artifact (`credential_refreshes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RefreshCounts {
    /// Every `api_key_refresh` that printed a token.
    pub scheduled: u64,
    /// Runs after a request was refused with 401 that printed a token.
    pub after_401: u64,
    /// Runs (either kind) that failed; the previous token stayed in use.
    pub failed: u64,
}

/// A refresh that failed during the run: when, and why (already scrubbed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefreshFailure {
    pub at: String,
    pub message: String,
}

/// A header value that is never logged.
fn sensitive(text: &str) -> Option<HeaderValue> {
    let mut v = HeaderValue::from_str(text).ok()?;
    v.set_sensitive(true);
    Some(v)
}

fn token(key: &str, generation: u64) -> Option<Token> {
    Some(Token { generation, bearer: sensitive(&format!("Bearer {key}"))?, raw: sensitive(key)? })
}

impl Credentials {
    /// A key that does not change; `None` when it cannot be a header value.
    pub fn fixed(key: &str) -> Option<Self> {
        let source = Source::new(token(key, 0)?, None);
        Some(Credentials { source: Some(Arc::new(source)), also_as: Vec::new() })
    }

    /// The scenario's key: the command's first token (run now, before anything is sent), else
    /// none (a fixed key is the client's own, from `target.api_key_env`). A command that fails,
    /// hangs, or prints no usable token refuses the run.
    pub async fn obtain(command: Option<&KeyCommand>) -> Result<Self, ScenarioError> {
        let Some(command) = command else { return Ok(Credentials::default()) };
        let key = run(command).await.map_err(|f| command.refusal(f.problem, f.fix))?;
        command.tokens.learn(&key);
        let first = token(&key, 1).ok_or_else(|| command.refusal("printed a token no header can carry", FIX))?;
        Ok(Credentials { source: Some(Arc::new(Source::new(first, Some(command.clone())))), also_as: Vec::new() })
    }

    /// Whether there is a key at all.
    pub fn is_some(&self) -> bool {
        self.source.is_some()
    }

    /// The same key, also sent under `name` (as it is, not as a bearer token).
    pub fn also_as(mut self, name: HeaderName) -> Self {
        if !self.also_as.contains(&name) {
            self.also_as.push(name);
        }
        self
    }

    /// `source`'s key, under this one's header names.
    pub fn with_source(mut self, source: &Credentials) -> Self {
        if source.source.is_some() {
            self.source.clone_from(&source.source);
        }
        self
    }

    /// Put the current key into `headers`; which token it was (for `after_401`).
    pub fn apply(&self, headers: &mut HeaderMap) -> u64 {
        let Some(source) = &self.source else { return 0 };
        source.with_current(|token| {
            headers.insert(AUTHORIZATION, token.bearer.clone());
            for name in &self.also_as {
                headers.insert(name.clone(), token.raw.clone());
            }
            token.generation
        })
    }

    /// Which token requests carry now.
    pub fn generation(&self) -> u64 {
        self.source.as_ref().map_or(0, |s| s.generation())
    }

    /// After `outcome`, sent with token `used`: when it was refused with 401 before any output
    /// and the key comes from a command, a newer token (the command run once for all the
    /// requests refused with the same token). `true`: send it again, once.
    pub async fn after_401(&self, outcome: &Outcome, used: u64) -> bool {
        let refused =
            matches!(outcome, Outcome::Failed(f) if f.kind == ErrorKind::Http(401) && f.first_output.is_none());
        refused && self.refresh_after_401(used).await
    }

    /// A request sent with token `used` was refused with 401: `true` when a newer token is in
    /// place (see `after_401`); always `false` for a fixed key.
    pub async fn refresh_after_401(&self, used: u64) -> bool {
        match &self.source {
            Some(source) if source.command.is_some() => source.refresh_after_401(used).await,
            _ => false,
        }
    }

    /// How often the command ran (none for a fixed key or no key).
    pub fn counts(&self) -> Option<RefreshCounts> {
        let source = self.source.as_ref().filter(|s| s.command.is_some())?;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let c = &source.counts;
        Some(RefreshCounts { scheduled: get(&c.scheduled), after_401: get(&c.after_401), failed: get(&c.failed) })
    }

    /// The refresh failures since the last call, for the level's artifact.
    pub fn take_failures(&self) -> Vec<RefreshFailure> {
        match &self.source {
            Some(s) => std::mem::take(&mut *s.failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner)),
            None => Vec::new(),
        }
    }

    /// The program's name, when the key comes from a command.
    pub fn program(&self) -> Option<&str> {
        self.source.as_ref()?.command.as_ref().map(|c| c.program.as_str())
    }

    /// Run the command every `api_key_refresh` until `stop` (or the returned guard is dropped),
    /// in a task of its own. Nothing when the key does not come from a command with a refresh.
    pub fn refresh_every(&self, stop: &CancellationToken) -> Option<Refresher> {
        let source = Arc::clone(self.source.as_ref()?);
        let every = source.command.as_ref()?.refresh?;
        let stop = stop.clone();
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = ticks.tick() => source.refresh(Why::Scheduled).await,
                }
            }
        });
        Some(Refresher(task))
    }
}

/// The background refresh; stopped when dropped.
#[derive(Debug)]
pub struct Refresher(tokio::task::JoinHandle<()>);

impl Drop for Refresher {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    Scheduled,
    After401,
}

/// Numbers the sources of a process.
static SOURCE_IDS: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's copy of the last command token it read: `(source id, token)`.
    static SEEN: RefCell<Option<(u64, Token)>> = const { RefCell::new(None) };
}

impl Source {
    fn new(first: Token, command: Option<KeyCommand>) -> Self {
        Source {
            id: SOURCE_IDS.fetch_add(1, Ordering::Relaxed),
            generation: AtomicU64::new(first.generation),
            current: if command.is_some() { Cell::Rotating(RwLock::new(first)) } else { Cell::Fixed(first) },
            command,
            refreshing: tokio::sync::Mutex::new(None),
            counts: Counts::default(),
            failures: Mutex::default(),
        }
    }

    /// `f` of the current token: a fixed key as it is; a command's token from this thread's
    /// copy while its generation is the current one (one atomic load), else read under the lock
    /// and copied.
    fn with_current<R>(&self, f: impl FnOnce(&Token) -> R) -> R {
        let cell = match &self.current {
            Cell::Fixed(token) => return f(token),
            Cell::Rotating(cell) => cell,
        };
        let generation = self.generation.load(Ordering::Acquire);
        SEEN.with_borrow_mut(|seen| {
            let fresh = matches!(seen, Some((id, t)) if *id == self.id && t.generation == generation);
            if !fresh {
                let token = cell.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
                *seen = Some((self.id, token));
            }
            match seen {
                Some((_, token)) => f(token),
                None => f(&cell.read().unwrap_or_else(std::sync::PoisonError::into_inner)),
            }
        })
    }

    /// The generation of the current token.
    fn generation(&self) -> u64 {
        match &self.current {
            Cell::Fixed(token) => token.generation,
            Cell::Rotating(_) => self.generation.load(Ordering::Acquire),
        }
    }

    /// Put `next` in place of the current token (a command's only), then publish its generation.
    fn replace(&self, next: Token) {
        if let Cell::Rotating(cell) = &self.current {
            let generation = next.generation;
            *cell.write().unwrap_or_else(std::sync::PoisonError::into_inner) = next;
            self.generation.store(generation, Ordering::Release);
        }
    }

    async fn refresh_after_401(&self, used: u64) -> bool {
        let mut failed_for = self.refreshing.lock().await;
        // Another request refused with the same token refreshed it meanwhile, or tried and failed.
        if self.generation() > used {
            return true;
        }
        if *failed_for == Some(used) {
            return false;
        }
        let ok = self.run_and_swap(Why::After401).await;
        if !ok {
            *failed_for = Some(used);
        }
        ok
    }

    async fn refresh(&self, why: Why) {
        let _running = self.refreshing.lock().await;
        self.run_and_swap(why).await;
    }

    /// Run the command (the caller holds `refreshing`) and put its token in place; a failure is
    /// counted, printed once with its time, and kept for the artifact.
    async fn run_and_swap(&self, why: Why) -> bool {
        let Some(command) = &self.command else { return false };
        let outcome = run(command).await.and_then(|key| {
            command.tokens.learn(&key);
            token(&key, self.generation() + 1)
                .ok_or(Failure { problem: "printed a token no header can carry".into(), fix: FIX })
        });
        match outcome {
            Ok(next) => {
                self.replace(next);
                let counter = if why == Why::Scheduled { &self.counts.scheduled } else { &self.counts.after_401 };
                counter.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(f) => {
                self.counts.failed.fetch_add(1, Ordering::Relaxed);
                let at = Stamp::now().iso();
                let when = if why == Why::Scheduled { "its scheduled refresh" } else { "the refresh after a 401" };
                let message = format!(
                    "target.api_key_command ({}) failed at {at}, in {when}: {}; the previous token stays in use",
                    command.program, f.problem
                );
                eprintln!("warning: {message}");
                self.failures
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(RefreshFailure { at, message });
                false
            }
        }
    }
}

/// The fix every refusal of the command's output gives.
const FIX: &str = "run the command by hand: it must print the token alone on one line and exit 0 within 30 s";

/// Why the command gave no token: in words that never quote its output.
struct Failure {
    problem: String,
    fix: &'static str,
}

/// Run the command once (no shell, no input, killed after `KEY_COMMAND_TIMEOUT`): its standard
/// output, trimmed, is the token.
async fn run(command: &KeyCommand) -> Result<String, Failure> {
    let fail = |problem: String| Failure { problem, fix: FIX };
    let (program, args) = command.argv.split_first().ok_or_else(|| fail("names no program".into()))?;
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Failure {
            problem: format!("{} could not be started ({})", command.program, e.kind()),
            fix: "check that the program is installed and on PATH, or give its full path",
        })?;
    let (mut stdout, mut stderr) = (child.stdout.take(), child.stderr.take());
    let read = async {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let o = async {
            if let Some(s) = stdout.as_mut() {
                let _ = s.take(OUTPUT_LIMIT as u64 + 1).read_to_end(&mut out).await;
            }
        };
        let e = async {
            if let Some(s) = stderr.as_mut() {
                let _ = s.take(OUTPUT_LIMIT as u64).read_to_end(&mut err).await;
            }
        };
        tokio::join!(o, e);
        let status = child.wait().await;
        (out, err, status)
    };
    let Ok((out, err, status)) = tokio::time::timeout(KEY_COMMAND_TIMEOUT, read).await else {
        return Err(Failure {
            problem: format!("{} printed no token within {} s", command.program, KEY_COMMAND_TIMEOUT.as_secs()),
            fix: "check that the command needs no input (a login prompt) and answers within 30 s",
        });
    };
    let out = String::from_utf8_lossy(&out);
    let key = out.trim();
    // The first line of standard error, without anything the command printed on its output.
    let hidden = Secrets::with_urls(vec![key.to_string()], &[]).and(&Secrets::default().learning(&command.tokens));
    let err = String::from_utf8_lossy(&err);
    let first = err.lines().map(str::trim).find(|l| !l.is_empty()).map(|l| hidden.message(l));
    let said = first.map_or_else(|| "nothing on standard error".to_string(), |l| format!("its standard error: {l}"));
    match status {
        Ok(s) if !s.success() => {
            let code = s.code().map_or_else(|| "a signal".to_string(), |c| format!("status {c}"));
            return Err(fail(format!("{} exited with {code} ({said})", command.program)));
        }
        Err(e) => return Err(fail(format!("{} could not be waited for ({})", command.program, e.kind()))),
        Ok(_) => {}
    }
    if key.is_empty() {
        return Err(fail(format!("{} exited 0 but printed nothing ({said})", command.program)));
    }
    if out.len() > OUTPUT_LIMIT || key.lines().nth(1).is_some() {
        return Err(fail(format!("{} printed more than one line; a token is one line", command.program)));
    }
    if HeaderValue::from_str(&format!("Bearer {key}")).is_err() {
        return Err(fail(format!(
            "{} printed a token with characters an HTTP header cannot carry (a control character or non-ASCII text)",
            command.program
        )));
    }
    Ok(key.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixed_key_fills_every_header_it_is_sent_under() {
        let c = Credentials::fixed("sk-1").unwrap().also_as(HeaderName::from_static("x-api-key"));
        let mut h = HeaderMap::new();
        assert_eq!(c.apply(&mut h), 0);
        assert_eq!(h[AUTHORIZATION], "Bearer sk-1");
        assert_eq!(h["x-api-key"], "sk-1");
        assert!(h[AUTHORIZATION].is_sensitive());
        assert!(c.counts().is_none() && c.program().is_none());
        assert!(Credentials::fixed("a\nb").is_none());
        // Two sources on one thread never share its copy.
        let a = Source::new(token("tok-a", 1).unwrap(), None);
        let b = Source::new(token("tok-b", 1).unwrap(), None);
        assert_ne!(a.id, b.id);
        let mut none = HeaderMap::new();
        Credentials::default().apply(&mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn every_thread_sees_a_new_token_once_it_is_in_place() {
        let rotating = |key: &str| {
            let mut s = Source::new(token(key, 1).unwrap(), None);
            s.current = Cell::Rotating(RwLock::new(token(key, 1).unwrap()));
            Arc::new(s)
        };
        let (one, two) = (rotating("tok-one-1"), rotating("tok-two-1"));
        let bearer = |s: &Source| s.with_current(|t| t.bearer.to_str().unwrap().to_string());
        assert_eq!(bearer(&one), "Bearer tok-one-1");
        assert_eq!(bearer(&two), "Bearer tok-two-1", "the thread's copy of another source is not used");
        one.replace(token("tok-one-2", 2).unwrap());
        assert_eq!((bearer(&one), one.generation()), ("Bearer tok-one-2".to_string(), 2));
        let other = Arc::clone(&one);
        let seen = std::thread::spawn(move || bearer(&other)).join().unwrap();
        assert_eq!(seen, "Bearer tok-one-2");
        one.replace(token("tok-one-3", 3).unwrap());
        assert_eq!(bearer(&one), "Bearer tok-one-3");
    }
}
