//! `target.api_key_command` and `target.api_key_refresh`: a key that a command prints (a cloud
//! endpoint's bearer token from `gcloud auth print-access-token`, an OIDC helper), run without a
//! shell before the run and again every `api_key_refresh` while it goes on.
//!
//! Only the program's name and the interval are written anywhere: the arguments may hold a
//! secret (a client secret, a password) and every token the command prints is learned by the
//! run's secrets (`tokens`), so no file or message the run writes can carry one. Running the
//! command is the request side's (`request::worker::credentials`).

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use super::ScenarioError;
use super::bounds::humantime_serde_opt;
use super::checker::Checker;
use super::raw::RawTarget;
use crate::redact::SecretLog;

/// How long the key command may take to print its token, each time it runs.
pub const KEY_COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// The validated key command.
#[derive(Clone, Serialize)]
pub struct KeyCommand {
    /// The program and its arguments, run as they are (no shell). Never written.
    #[serde(skip)]
    pub argv: Vec<String>,
    /// The program's file name, the only part written (messages, the resolved scenario).
    pub program: String,
    /// Run the command again this often during the run; `None`: only before it (and on a 401).
    #[serde(with = "humantime_serde_opt", skip_serializing_if = "Option::is_none")]
    pub refresh: Option<Duration>,
    /// Every token the command printed, withheld from everything written
    /// (`Scenario::secrets` learns them); shared by every copy of the scenario.
    #[serde(skip)]
    pub tokens: SecretLog,
    /// The scenario file, for the refusals made when the command first runs.
    #[serde(skip)]
    pub file: String,
}

impl KeyCommand {
    /// A refusal of the command before the run (exit code 2): the file, the key, what the
    /// command did and what to do.
    pub fn refusal(&self, problem: impl Into<String>, fix: impl Into<String>) -> ScenarioError {
        ScenarioError {
            file: self.file.clone(),
            key: "target.api_key_command".into(),
            problem: problem.into(),
            fix: fix.into(),
        }
    }
}

impl fmt::Debug for KeyCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyCommand").field("program", &self.program).field("refresh", &self.refresh).finish()
    }
}

/// `target.api_key_command` and `target.api_key_refresh`, checked: a non-empty argv whose
/// program is named, never with `api_key_env`; a refresh interval only with a command, within
/// its bounds (10 s to 24 h).
pub(super) fn key_command(c: &Checker, t: &RawTarget) -> Result<Option<KeyCommand>, ScenarioError> {
    let Some(argv) = &t.api_key_command else {
        if t.api_key_refresh.is_some() {
            return Err(c.err(
                "target.api_key_refresh",
                "is set without target.api_key_command: there is no command to run again",
                "add api_key_command = [\"gcloud\", \"auth\", \"print-access-token\"] (the command printing the token), or remove api_key_refresh",
            ));
        }
        return Ok(None);
    };
    if t.api_key_env.is_some() {
        return Err(c.err(
            "target.api_key_command",
            "is set together with target.api_key_env: the key would come from two places",
            "keep one: api_key_env for a key that does not change, api_key_command for a token a command prints",
        ));
    }
    let Some(first) = argv.first().filter(|p| !p.trim().is_empty()) else {
        return Err(c.err(
            "target.api_key_command",
            "names no program (the list is empty or its first item is blank)",
            "give the program and its arguments as a list, e.g. api_key_command = [\"gcloud\", \"auth\", \"print-access-token\"]",
        ));
    };
    if argv.iter().any(|a| a.contains('\0')) {
        return Err(c.err(
            "target.api_key_command",
            "holds a NUL character, which no program argument can carry",
            "remove it from the list",
        ));
    }
    let refresh = match t.api_key_refresh.as_deref() {
        None => None,
        Some(text) => Some(c.duration("target.api_key_refresh", Some(text), Duration::ZERO)?),
    };
    let program = std::path::Path::new(first)
        .file_name()
        .map_or_else(|| first.clone(), |name| name.to_string_lossy().into_owned());
    Ok(Some(KeyCommand {
        argv: argv.clone(),
        program: crate::redact::visible(&program),
        refresh,
        tokens: SecretLog::default(),
        file: c.file().to_string(),
    }))
}
