//! The simulator on the command line: the flags and the foreground server of `anvil-sim` and of
//! `anvil-load mock`, one definition for both.

use std::path::PathBuf;
use std::sync::Arc;

use crate::{MockStats, PROFILE_NAMES, Profile, tokenize};

/// Where the simulator listens, how it behaves and how it counts prompt tokens.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8000")]
    pub listen: String,
    /// Behaviour profile: instant, fast, realistic, llamacpp, faults, spec.
    #[arg(long, default_value = "realistic")]
    pub profile: String,
    /// Count prompt tokens with this local tokenizer.json instead of the built-in rule.
    #[arg(long, value_name = "PATH")]
    pub tokenizer: Option<PathBuf>,
    /// Serve only this model name, as vLLM's --served-model-name (repeatable): /v1/models lists
    /// the names, and a request naming another is answered 404. Without it, any name is served.
    #[arg(long = "served-model-name", value_name = "NAME")]
    pub served_model_names: Vec<String>,
    /// Serve a LoRA adapter beside the base model, as vLLM's --lora-modules (repeatable):
    /// NAME, or NAME:MS with its own decode time per output token in milliseconds. /v1/models
    /// lists it with the base as parent; a request naming no served model is answered 404.
    #[arg(long = "lora", value_name = "NAME[:MS]")]
    pub loras: Vec<String>,
}

/// Why the simulator did not serve, or stopped before Ctrl-C.
#[derive(Debug)]
pub enum ServeError {
    /// A flag it cannot use: an unknown profile, a tokenizer it cannot load, an address it cannot
    /// listen on. Exit code 2.
    BadInput(String),
    /// The server itself failed. Exit code 1.
    Failed(String),
}

impl ServeError {
    /// The process's exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            ServeError::BadInput(_) => 2,
            ServeError::Failed(_) => 1,
        }
    }
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::BadInput(m) | ServeError::Failed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ServeError {}

/// Serves `args` in the foreground until Ctrl-C. Once listening it prints one line to stderr,
/// `<name> (profile P) listening on http://ADDR/v1 — Ctrl-C stops it`, whose URL is the base
/// URL a client is given (with `--listen 127.0.0.1:0`, the port the system chose).
pub async fn serve(args: &ServeArgs, name: &str) -> Result<(), ServeError> {
    let mut profile = Profile::named(&args.profile).ok_or_else(|| {
        ServeError::BadInput(format!(
            "--profile {:?} is not a simulator profile; use one of: {}",
            args.profile,
            PROFILE_NAMES.join(", ")
        ))
    })?;
    if let Some(path) = &args.tokenizer {
        tokenize::load_tokenizer(path)
            .map_err(|e| ServeError::BadInput(format!("--tokenizer {}: cannot load it: {e}", path.display())))?;
        profile.tokenizer = Some(path.clone());
    }
    if let Some(bad) = args.served_model_names.iter().find(|n| n.trim().is_empty()) {
        return Err(ServeError::BadInput(format!("--served-model-name {bad:?}: a model name cannot be empty")));
    }
    profile.served_model_names = args.served_model_names.clone();
    profile.loras = args
        .loras
        .iter()
        .map(|l| crate::lora::Lora::parse(l))
        .collect::<Result<_, _>>()
        .map_err(ServeError::BadInput)?;
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|e| ServeError::BadInput(format!("--listen {}: cannot listen there: {e}", args.listen)))?;
    let addr = listener.local_addr().map_err(|e| ServeError::Failed(e.to_string()))?;
    // The handlers are in place before the banner says Ctrl-C stops it: a signal sent the moment
    // the banner is read must stop the server, not kill it with the default action.
    let shutdown = stop_signal();
    eprintln!("{name} (profile {}) listening on http://{addr}/v1 — Ctrl-C stops it", args.profile);
    crate::serve(listener, profile, Arc::new(MockStats::default()), shutdown)
        .await
        .map_err(|e| ServeError::Failed(format!("simulator failed: {e}")))
}

/// SIGINT or SIGTERM (Ctrl-C elsewhere), listened to from the moment this is called, not from
/// the future's first poll.
fn stop_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let streams = signal(SignalKind::interrupt()).ok().zip(signal(SignalKind::terminate()).ok());
        async move {
            match streams {
                Some((mut int, mut term)) => {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                }
                None => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
