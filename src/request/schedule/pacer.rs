//! Waiting until an arrival's deadline.
//!
//! tokio's timer fires on whole milliseconds and rounds deadlines up, so a dispatcher that sleeps
//! on it sends each arrival 1–2 ms late. `PrecisePacer` sleeps on tokio until shortly before the
//! deadline, then hands the last stretch to a dedicated timer thread whose `nanosleep` has
//! microsecond resolution (its timer slack lowered where the OS allows), and is woken by it.
//! `TokioPacer` is the plain timer: exact under tokio's paused test clock, which the precise one
//! cannot see.

use std::future::Future;
use std::sync::mpsc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

pub trait Pacer: Send + Sync + 'static {
    fn wait_until(&self, deadline: Instant) -> impl Future<Output = ()> + Send;
}

/// tokio's timer alone (millisecond ticks).
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioPacer;

impl Pacer for TokioPacer {
    fn wait_until(&self, deadline: Instant) -> impl Future<Output = ()> + Send {
        tokio::time::sleep_until(deadline)
    }
}

/// How long before a deadline the timer thread takes over from tokio's timer: more than one
/// tokio tick plus its rounding.
const HANDOVER: Duration = Duration::from_millis(3);

/// tokio's timer for the bulk of the wait, a timer thread for the last few milliseconds.
#[derive(Debug)]
pub struct PrecisePacer {
    tx: mpsc::Sender<(std::time::Instant, oneshot::Sender<()>)>,
}

impl PrecisePacer {
    pub fn new() -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<(std::time::Instant, oneshot::Sender<()>)>();
        std::thread::Builder::new().name("anvil-pacer".into()).spawn(move || {
            crate::sys::lower_timer_slack();
            while let Ok((deadline, wake)) = rx.recv() {
                let now = std::time::Instant::now();
                if deadline > now {
                    std::thread::sleep(deadline - now);
                }
                let _ = wake.send(());
            }
        })?;
        Ok(PrecisePacer { tx })
    }
}

impl Pacer for PrecisePacer {
    fn wait_until(&self, deadline: Instant) -> impl Future<Output = ()> + Send {
        let tx = self.tx.clone();
        async move {
            if let Some(coarse) = deadline.checked_sub(HANDOVER) {
                if Instant::now() < coarse {
                    tokio::time::sleep_until(coarse).await;
                }
            }
            if Instant::now() >= deadline {
                return;
            }
            let (wake, woken) = oneshot::channel();
            if tx.send((deadline.into_std(), wake)).is_ok() {
                let _ = woken.await;
            } else {
                tokio::time::sleep_until(deadline).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_precise_pacer_never_wakes_early() {
        let pacer = PrecisePacer::new().unwrap();
        for i in 0..40u64 {
            // Deadlines on both sides of the handover to the timer thread.
            let deadline = Instant::now() + Duration::from_micros(500 + 173 * i);
            pacer.wait_until(deadline).await;
            assert!(Instant::now() >= deadline, "woke before deadline #{i}");
        }
        // A deadline already past returns at once.
        pacer.wait_until(Instant::now() - Duration::from_millis(1)).await;
    }
}
