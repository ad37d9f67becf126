//! Connections opened before a level's clock starts, so no measured request pays for a handshake
//! its neighbours did not.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use hyper::Method;

use super::{Client, request_uri, transport};

impl Client {
    /// Open `n` connections before a level's clock starts, so no measured request pays for a TCP
    /// handshake its neighbours did not: `n` concurrent `GET` requests (to the server's `/models`),
    /// whose connections stay in the pool. Failures are ignored; a request that finds no idle
    /// connection simply opens one, as it would have anyway.
    pub async fn warm_connections(&self, url: &str, n: usize) {
        let limit = self.timeouts.connect.saturating_add(Duration::from_secs(5));
        let Ok(uri) = request_uri(url) else { return };
        let send = |_| {
            let request = self.request(Method::GET, uri.clone(), Bytes::new());
            async move {
                let response = tokio::time::timeout(limit, self.http.send(request)).await.ok()?.ok()?;
                // The body's first bytes are taken (and dropped) at once: held, they would pin
                // the connection's read buffer, and hyper would give the connection a second one
                // for its next read (8 KiB per connection at the peak, held until all answered).
                let mut body = transport::body(response);
                let _ = tokio::time::timeout(Duration::from_secs(5), body.next()).await;
                Some(body)
            }
        };
        // Every response is held until all have their headers, so that almost always `n` are
        // opened. Not always: a connection whose small body has already arrived goes back to the
        // pool, and a request still waiting for its own connect may take it instead.
        let bodies = futures::future::join_all((0..n).map(send)).await;
        let drain = bodies.into_iter().flatten().map(|mut body| async move {
            let _ =
                tokio::time::timeout(Duration::from_secs(5), async { while let Some(Ok(_)) = body.next().await {} })
                    .await;
        });
        futures::future::join_all(drain).await;
        // A drained connection goes back to the pool from a task of its own, once it is ready
        // for another request, and a connect that lost the race to a returning connection ends
        // in the background and joins the pool too. Until those tasks have run, the level's first
        // requests would find the pool short and open connections of their own, a handshake and
        // the server's accept inside their timings (a block of some 40 requests at 256 streams,
        // each 1-2 ms late to the server).
        tokio::time::sleep(settle_time(n)).await;
    }
}

/// How long warmed connections get to return to the pool: enough for the tasks that return them
/// (some 20 µs of a client core each), and bounded.
fn settle_time(connections: usize) -> Duration {
    (Duration::from_millis(2) + Duration::from_micros(20).saturating_mul(connections as u32))
        .min(Duration::from_millis(50))
}
