//! `workload.media.delivery = "http"`: the file server the engine fetches media from, the way
//! engines fetch from object stores.
//!
//! One server per bind address for the process (`for_bind`), started on first use on the
//! runtime in use and started again if that runtime has gone. It serves `GET /media/NAME` from
//! a table the pools fill before each level (`insert`) and empty when the next level's pool
//! replaces them (`clear`), so it holds one level's media at most. Anything else is 404. It
//! counts the files and bytes it served.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

/// The file table and where the engine reaches it.
#[derive(Debug)]
pub struct MediaFiles {
    /// `http://host:port`, without a trailing slash.
    base: String,
    files: RwLock<HashMap<String, (Bytes, &'static str)>>,
    pub served_files: AtomicU64,
    pub served_bytes: AtomicU64,
    task: tokio::task::AbortHandle,
}

/// A live server: the address it was asked to bind, the URL it was told, the server.
type Live = (SocketAddr, Option<String>, Arc<MediaFiles>);

/// The live servers, by the address they were asked to bind.
static SERVERS: Mutex<Vec<Live>> = Mutex::new(Vec::new());

impl MediaFiles {
    /// The server of `bind` (advertised as `url`, or as its bound address), started when there
    /// is none alive. Must be called inside a tokio runtime.
    pub fn for_bind(bind: SocketAddr, url: Option<&str>) -> std::io::Result<Arc<MediaFiles>> {
        // Outside a runtime (nothing to serve from) there is no server to start.
        tokio::runtime::Handle::try_current().map_err(std::io::Error::other)?;
        let mut servers = SERVERS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        servers.retain(|(_, _, s)| !s.task.is_finished());
        if let Some((_, _, s)) = servers.iter().find(|(b, u, _)| *b == bind && u.as_deref() == url) {
            return Ok(Arc::clone(s));
        }
        let listener = std::net::TcpListener::bind(bind)?;
        listener.set_nonblocking(true)?;
        let bound = listener.local_addr()?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let base = url.map_or_else(|| format!("http://{bound}"), str::to_string);
        let files = Arc::new_cyclic(|weak: &std::sync::Weak<MediaFiles>| {
            let app = axum::Router::new().route("/media/{name}", axum::routing::get(serve)).with_state(weak.clone());
            let task = tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            });
            MediaFiles {
                base,
                files: RwLock::default(),
                served_files: AtomicU64::new(0),
                served_bytes: AtomicU64::new(0),
                task: task.abort_handle(),
            }
        });
        servers.push((bind, url.map(str::to_string), Arc::clone(&files)));
        Ok(files)
    }

    /// The URL of file `name`.
    pub fn url(&self, name: &str) -> String {
        format!("{}/media/{name}", self.base)
    }

    pub fn insert(&self, name: String, bytes: Bytes, mime: &'static str) {
        if let Ok(mut files) = self.files.write() {
            files.insert(name, (bytes, mime));
        }
    }

    /// Forgets every file (a new level's pool replaces them).
    pub fn clear(&self) {
        if let Ok(mut files) = self.files.write() {
            files.clear();
        }
    }
}

async fn serve(State(files): State<std::sync::Weak<MediaFiles>>, Path(name): Path<String>) -> Response {
    let Some(files) = files.upgrade() else { return StatusCode::NOT_FOUND.into_response() };
    let found = files.files.read().ok().and_then(|f| f.get(&name).cloned());
    match found {
        Some((bytes, mime)) => {
            files.served_files.fetch_add(1, Ordering::Relaxed);
            files.served_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
            ([(header::CONTENT_TYPE, mime)], bytes).into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}
